//! The bad-input cases: what a case is (its inputs, how the trainer is started, what every
//! process must do), the builders its rows are written with, and the two tables.

use std::ops::Range;
use std::time::Duration;

/// The shipped MNIST sample's training files.
pub const IMAGES: &str = "train-images-idx3-ubyte";
pub const LABELS: &str = "train-labels-idx1-ubyte";
pub const IMAGES_GZ: &str = "train-images-idx3-ubyte.gz";
pub const LABELS_GZ: &str = "train-labels-idx1-ubyte.gz";

/// A small, quick spec body for rendezvous failures (training never starts in these cases).
pub const SMALL: &str =
    "limit_train = 256\nlimit_test = 64\n[train]\nmax_steps = 2\n[checkpoint]\nevery_epochs = 0\n";

/// One bad-input case: what the run folder's inputs are, how the trainer is started, and what
/// every process it starts must do.
pub struct Case {
    /// Named in failures.
    pub name: &'static str,
    pub input: Input,
    /// `--set` overrides, given to every process.
    pub sets: &'static [&'static str],
    pub launch: Launch,
    /// The exit code of every process.
    pub exit: i32,
    /// How long each process may take, from the start of the case.
    pub took: Range<Duration>,
    /// Per process (in launch order): substrings of its stderr. Placeholders: `{spec}`, `{data}`
    /// (the data directory), `{images}` / `{labels}` / `{images.gz}` (files in it), `{port}`
    /// (MASTER_PORT) and `{line:PREFIX}` (the 1-based line of the spec starting with PREFIX).
    pub says: &'static [&'static [&'static str]],
}

/// The spec, and the data it reads.
pub enum Input {
    /// `write_spec`: `model` reading the shipped MNIST sample, `body` appended.
    Sample {
        model: &'static str,
        body: &'static str,
    },
    /// An `mnist-cnn` spec reading the data directory `data` makes, `body` appended.
    Data { data: DataDir, body: &'static str },
    /// A small `gpt` spec (`[model]` keys, then `data`, the `[data]` keys, then `[train]` with a
    /// few steps) beside the directory `text` holding `files`.
    Text {
        data: &'static str,
        files: &'static [(&'static str, TextFile)],
    },
}

/// A file of a language model's data.
pub enum TextFile {
    Bytes(&'static [u8]),
    /// `n` little-endian u16 ids 1, with `bad = Some((i, v))` setting id `i` to `v`.
    U16 {
        n: usize,
        bad: Option<(usize, u16)>,
    },
}

/// A data directory made for a case.
pub enum DataDir {
    /// `empty`, an existing empty directory.
    Empty,
    /// `no-such-dir`, which does not exist.
    Missing,
    /// `data`, a copy of the sample whose gzipped training images are cut in half.
    TruncatedGzip,
    /// `data`, a copy of the sample without the files in `skip`, plus the plain IDX `files`.
    Edited {
        skip: &'static [&'static str],
        files: &'static [(&'static str, Idx)],
    },
}

/// A `gpt` spec reading `files` (in `{data}`) with the `[data]` keys `data`.
pub const fn lm_data(data: &'static str, files: &'static [(&'static str, TextFile)]) -> Input {
    Input::Text { data, files }
}

/// A plain (not gzipped) IDX file.
pub enum Idx {
    /// `magic`, then n × h × w, then n·h·w pixel bytes, less the last `cut`.
    Images {
        magic: u32,
        n: u32,
        h: u32,
        w: u32,
        cut: usize,
    },
    /// `n` labels 0..=9, with `bad = Some((i, v))` setting label `i` to `v`.
    Labels { n: u32, bad: Option<(usize, u8)> },
}

/// How a case starts the trainer.
pub enum Launch {
    /// `ddp-trainer SPEC --out OUT`.
    Single,
    /// `ddp-trainer SPEC --standalone --nproc N --out OUT`.
    Standalone(usize),
    /// Ranks started side by side the way torchrun would, on a free MASTER_PORT.
    Ranks(&'static [Rank]),
    /// Rank 0 of 2 with a MASTER_PORT that another socket holds.
    BusyPort,
}

pub struct Rank {
    pub rank: usize,
    pub world: usize,
    /// `DDP_TOKEN` (None: unset).
    pub token: Option<&'static str>,
}

pub const fn rank(rank: usize, world: usize, token: Option<&'static str>) -> Rank {
    Rank { rank, world, token }
}

/// A configuration error fails fast, with exit code 2.
pub const CONFIG: Range<Duration> = Duration::ZERO..Duration::from_secs(20);

/// A configuration error of a single-process run.
pub const fn config_error(
    name: &'static str,
    input: Input,
    sets: &'static [&'static str],
    says: &'static [&'static [&'static str]],
) -> Case {
    Case {
        name,
        input,
        sets,
        launch: Launch::Single,
        exit: 2,
        took: CONFIG,
        says,
    }
}

/// An `mnist-cnn` spec with `body`, reading the shipped sample.
pub const fn sample(body: &'static str) -> Input {
    Input::Sample {
        model: "mnist-cnn",
        body,
    }
}

/// An `mnist-cnn` spec with `body`, reading the data directory `data`.
pub const fn data(data: DataDir, body: &'static str) -> Input {
    Input::Data { data, body }
}

/// A copy of the sample without `skip`, plus `files`.
pub const fn edited(skip: &'static [&'static str], files: &'static [(&'static str, Idx)]) -> Input {
    data(DataDir::Edited { skip, files }, "")
}

pub const fn images(magic: u32, n: u32, h: u32, w: u32) -> Idx {
    short_images(magic, n, h, w, 0)
}

/// Images without their last `cut` bytes.
pub const fn short_images(magic: u32, n: u32, h: u32, w: u32, cut: usize) -> Idx {
    Idx::Images {
        magic,
        n,
        h,
        w,
        cut,
    }
}

pub const fn labels(n: u32) -> Idx {
    Idx::Labels { n, bad: None }
}

/// `n` labels, label `i` set to `v`.
pub const fn bad_label(n: u32, i: usize, v: u8) -> Idx {
    Idx::Labels {
        n,
        bad: Some((i, v)),
    }
}

/// Data, spec and launcher-environment errors: exit code 2, fast, nothing written.
#[rustfmt::skip]
pub const CONFIG_ERRORS: &[Case] = &[
    // Data.
    config_error(
        "missing_data_files_are_named",
        data(DataDir::Empty, ""),
        &[],
        // The first missing file, with its full path, and the list of what the directory must
        // hold.
        &[&[
            "{images}",
            "file not found (nor train-images-idx3-ubyte.gz)",
            "train-images-idx3-ubyte[.gz]",
            "train-labels-idx1-ubyte[.gz]",
            "t10k-images-idx3-ubyte[.gz]",
            "t10k-labels-idx1-ubyte[.gz]",
        ]],
    ),
    config_error(
        "missing_data_directory_is_named",
        data(DataDir::Missing, ""),
        &[],
        &[&["the directory {data} does not exist"]],
    ),
    config_error(
        "truncated_gzip_data_file_is_named",
        data(DataDir::TruncatedGzip, ""),
        &[],
        &[&["{images.gz}: ", "truncated"]],
    ),
    config_error(
        "truncated_plain_data_file_is_named",
        edited(&[IMAGES_GZ], &[(IMAGES, short_images(0x803, 10, 28, 28, 5))]),
        &[],
        &[&["{images}: truncated", "10 images of 28×28 (7840 bytes) but only 7835 bytes follow"]],
    ),
    config_error(
        "wrong_idx_magic_is_named",
        edited(&[IMAGES_GZ], &[(IMAGES, images(0x804, 4, 28, 28))]),
        &[],
        &[&["{images}: ", "magic 0x00000804", "expected 0x00000803"]],
    ),
    config_error(
        "labels_file_in_place_of_images_says_so",
        edited(&[IMAGES_GZ], &[(IMAGES, labels(4))]),
        &[],
        &[&["{images}: not an IDX images file: magic 0x00000801 (this is an IDX labels file)"]],
    ),
    config_error(
        "wrong_image_dimensions_are_named",
        edited(&[IMAGES_GZ, LABELS_GZ], &[(IMAGES, images(0x803, 4, 32, 32)), (LABELS, labels(4))]),
        &[],
        &[&["{images}: ", "4×32×32", "N×28×28"]],
    ),
    config_error(
        "label_count_mismatch_names_both_files",
        edited(
            &[IMAGES_GZ, LABELS_GZ],
            &[(IMAGES, images(0x803, 10, 28, 28)), (LABELS, labels(9))],
        ),
        &[],
        &[&["{labels}: holds 9 labels", "{images} holds 10 images", "must have the same count"]],
    ),
    config_error(
        "label_out_of_range_is_named",
        edited(
            &[IMAGES_GZ, LABELS_GZ],
            &[(IMAGES, images(0x803, 3, 28, 28)), (LABELS, bad_label(3, 1, 10))],
        ),
        &[],
        &[&["{labels}: label 10 at index 1 is out of range"]],
    ),
    // Language-model data.
    config_error(
        "empty_text_file_is_named",
        lm_data("name = \"text\"\npath = \"text/input.txt\"\n", &[("input.txt", TextFile::Bytes(b""))]),
        &[],
        &[&["{data}/input.txt: the text file is empty; give a file with the text to train on"]],
    ),
    config_error(
        "non_utf8_text_names_the_byte_offset_and_the_byte_tokenizer",
        lm_data("name = \"text\"\npath = \"text/input.txt\"\n", &[("input.txt", TextFile::Bytes(b"to be or \xff not"))]),
        &[],
        &[&["{data}/input.txt: not a UTF-8 text file: the byte 0xff at offset 9 is not valid UTF-8; use tokenizer = \"byte\""]],
    ),
    config_error(
        "text_shorter_than_a_window_names_the_part_and_block",
        lm_data("name = \"text\"\npath = \"text/input.txt\"\n", &[("input.txt", TextFile::Bytes(b"to be or not to be, that is the question"))]),
        &[],
        &[&["{data}/input.txt: the validation part has 4 tokens, fewer than block + 1 = 9", "use a longer text, a larger val_fraction or a smaller block"]],
    ),
    config_error(
        "token_file_of_odd_length_names_the_dtype",
        lm_data(
            "name = \"tokens\"\npath = \"text\"\nvocab_size = 10\n",
            &[("train.bin", TextFile::Bytes(&[1; 101])), ("val.bin", TextFile::U16 { n: 50, bad: None })],
        ),
        &[],
        &[&["{data}/train.bin: the token file has 101 bytes, not a multiple of 2 (u16 ids); is dtype = \"u32\" what wrote it?"]],
    ),
    config_error(
        "token_id_outside_the_vocabulary_is_named_with_its_position",
        lm_data(
            "name = \"tokens\"\npath = \"text\"\nvocab_size = 10\n",
            &[("train.bin", TextFile::U16 { n: 200, bad: Some((150, 12)) }), ("val.bin", TextFile::U16 { n: 50, bad: None })],
        ),
        &[],
        &[&["{data}/train.bin: token 150 has id 12, not below vocab_size = 10; set vocab_size to the tokenizer's vocabulary size (at least 13)"]],
    ),
    config_error(
        "heads_not_dividing_embd_names_both",
        lm_data("name = \"text\"\npath = \"text/input.txt\"\n", &[("input.txt", TextFile::Bytes(b"to be"))]),
        &["model.heads=3"],
        &[&["{spec}: model.heads: 3 heads do not divide embd = 16: pick heads that divide embd"]],
    ),
    config_error(
        "gpt_on_image_data_is_refused",
        lm_data("name = \"mnist\"\npath = \"text\"\n", &[]),
        &[],
        &[&["{spec}: data.name: model \"gpt\" is a language model: it trains on data.name = \"text\" or \"tokens\", not \"mnist\""]],
    ),
    config_error(
        "image_model_on_text_is_refused",
        lm_data("name = \"text\"\npath = \"text/input.txt\"\n", &[("input.txt", TextFile::Bytes(b"to be"))]),
        &["model.name=\"mlp\"", "model.layers=1", "model.heads=2", "model.embd=16", "model.block=8"],
        &[&["{spec}: model.name: data.name = \"text\" is a token stream for a language model: use model.name = \"gpt\""]],
    ),
    // Spec.
    config_error(
        "unknown_model_lists_the_choices_with_file_and_line",
        Input::Sample { model: "mnist-cnnn", body: "" },
        &[],
        &[&[
            "{spec}:{line:name = \"mnist-cnnn\"}: ",
            "mnist-cnnn",
            "`mnist-cnn`", "`mlp`", "`convnet-bn`", "`resnet18`", "`resnet50`", "`linear`",
        ]],
    ),
    config_error(
        "unknown_model_from_set_lists_the_choices",
        sample(""),
        &["model.name=resnet101"],
        &[&[
            "{spec}: --set model.name=resnet101: unknown variant `resnet101`",
            "`mnist-cnn`", "`mlp`", "`convnet-bn`", "`resnet18`", "`resnet50`", "`linear`",
        ]],
    ),
    config_error(
        "unknown_key_names_file_line_and_suggestion",
        sample("[train]\nbatch_size = 8\nepoch = 3\n"),
        &[],
        &[&["{spec}:{line:epoch = 3}: unknown key `train.epoch`; did you mean `train.epochs`?"]],
    ),
    config_error(
        "wrong_type_names_file_line_and_expected_type",
        sample("[train]\nbatch_size = \"big\"\n"),
        &[],
        &[&["{spec}:{line:batch_size = }: invalid type: string \"big\", expected"]],
    ),
    // Through --set, the override is named.
    config_error(
        "wrong_type_from_set_names_the_override",
        sample(""),
        &["train.lr=0.1", "train.batch_size=big"],
        &[&["{spec}: --set train.batch_size=big: invalid type: string \"big\""]],
    ),
    config_error(
        "batch_size_zero_names_the_key",
        sample("[train]\nbatch_size = 0\n"),
        &[],
        &[&["{spec}", "train.batch_size: must be at least 1"]],
    ),
    config_error(
        "batch_size_zero_from_set_names_the_key",
        sample(""),
        &["train.batch_size=0"],
        &[&["train.batch_size: must be at least 1"]],
    ),
    // The training recipe's keys.
    config_error(
        "grad_clip_not_positive_names_the_key",
        sample("[train]\ngrad_clip = 0.0\n"),
        &[],
        &[&["{spec}: train.grad_clip: must be a positive number", "got 0; leave it out to not clip"]],
    ),
    config_error(
        "steps_zero_names_the_key",
        sample(""),
        &["train.steps=0"],
        &[&["{spec}: train.steps: must be at least 1"]],
    ),
    config_error(
        "warmup_longer_than_the_run_names_both_keys",
        sample("[train]\nsteps = 50\nscheduler = { kind = \"cosine\", warmup_steps = 100 }\n"),
        &[],
        &[&["{spec}: train.scheduler.warmup_steps: 100 is more than train.steps = 50"]],
    ),
    config_error(
        "warmup_in_steps_and_epochs_names_both_keys",
        sample("[train]\nscheduler = { warmup_steps = 10, warmup_epochs = 0.5 }\n"),
        &[],
        &[&["train.scheduler.warmup_steps: and train.scheduler.warmup_epochs are both set", "keep one of them"]],
    ),
    config_error(
        "min_lr_above_lr_names_both_keys",
        sample("[train]\nlr = 0.001\nscheduler = { kind = \"cosine\", min_lr = 0.01 }\n"),
        &[],
        &[&["{spec}: train.scheduler.min_lr: 0.01 is more than train.lr = 0.001", "set min_lr at most train.lr"]],
    ),
    config_error(
        "nccl_backend_on_cpu_names_the_key",
        sample("[ddp]\nbackend = \"nccl\"\ndevices = \"cpu\"\n"),
        &[],
        &[&["{spec}: ddp.backend: \"nccl\" needs CUDA devices"]],
    ),
    config_error(
        "set_of_a_missing_key_suggests_the_closest",
        sample(""),
        &["train.bach_size=8"],
        &[&["{spec}: --set train.bach_size: no such key; did you mean `train.batch_size`?"]],
    ),
    config_error(
        "set_without_a_value_says_key_value",
        sample(""),
        &["train.batch_size"],
        &[&["--set train.batch_size: expected key=value"]],
    ),
    // Configuration errors are found before the process group forms: a replica of a world of 2
    // with bad input exits with 2 at once instead of waiting `ddp.timeout_s` for its peer.
    Case {
        name: "config_errors_do_not_wait_for_peers (rank 0, bad data)",
        input: data(DataDir::TruncatedGzip, "[ddp]\ntimeout_s = 300\n"),
        sets: &[],
        launch: Launch::Ranks(&[rank(0, 2, None)]),
        exit: 2,
        took: CONFIG,
        says: &[&["rank 0: {images.gz}: "]],
    },
    Case {
        name: "config_errors_do_not_wait_for_peers (rank 1, bad data)",
        input: data(DataDir::TruncatedGzip, "[ddp]\ntimeout_s = 300\n"),
        sets: &[],
        launch: Launch::Ranks(&[rank(1, 2, None)]),
        exit: 2,
        took: CONFIG,
        says: &[&["rank 1: {images.gz}: "]],
    },
    Case {
        name: "config_errors_do_not_wait_for_peers (rank 1, bad --set)",
        input: sample("[ddp]\ntimeout_s = 300\n"),
        sets: &["train.batch_size=0"],
        launch: Launch::Ranks(&[rank(1, 2, None)]),
        exit: 2,
        took: CONFIG,
        says: &[&["train.batch_size: must be at least 1"]],
    },
    Case {
        name: "standalone_config_error_exits_2_and_names_the_file",
        input: edited(&[IMAGES_GZ], &[(IMAGES, images(0x0000_0803, 4, 32, 32))]),
        sets: &[],
        launch: Launch::Standalone(2),
        exit: 2,
        took: CONFIG,
        says: &[&["{images}: unexpected dimensions 4×32×32", "exited with code 2"]],
    },
];

/// Both ranks of a rendezvous that fails within its 5 s timeout give up in time.
pub const PAIR: Range<Duration> = Duration::ZERO..Duration::from_secs(12);

/// Peers and rendezvous: exit code 1, nothing written. `says` lists rank 0's messages first.
#[rustfmt::skip]
pub const RENDEZVOUS_FAILURES: &[Case] = &[
    // Rank 1 is refused at once with both sizes; rank 0 logs the refusal and names the missing
    // rank.
    Case {
        name: "world_size_mismatch_names_both_sizes",
        input: sample(SMALL),
        sets: &["ddp.timeout_s=5"],
        launch: Launch::Ranks(&[rank(0, 2, None), rank(1, 3, None)]),
        exit: 1,
        took: PAIR,
        says: &[
            &[
                "refused (claims rank 1)",
                "WORLD_SIZE=3",
                "WORLD_SIZE=2",
                "rank 1 never joined within 5 s",
            ],
            &["rank 1 says WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2"],
        ],
    },
    Case {
        name: "master_port_in_use_fails_fast",
        input: sample(SMALL),
        // Far longer than the case may take.
        sets: &["ddp.timeout_s=30"],
        launch: Launch::BusyPort,
        exit: 1,
        took: Duration::ZERO..Duration::from_secs(10),
        says: &[&[
            "rendezvous failed on rank 0",
            "127.0.0.1:{port} is already in use",
            "pick another MASTER_PORT",
        ]],
    },
    Case {
        name: "peer_that_never_comes_is_named",
        input: sample(SMALL),
        sets: &["ddp.timeout_s=2"],
        launch: Launch::Ranks(&[rank(0, 2, None)]),
        exit: 1,
        took: Duration::from_millis(1900)..Duration::from_secs(8),
        says: &[&["rank 1 never joined within 2 s", "127.0.0.1:{port}"]],
    },
    Case {
        name: "wrong_ddp_token_is_refused",
        input: sample(SMALL),
        sets: &["ddp.timeout_s=5"],
        launch: Launch::Ranks(&[rank(0, 2, Some("a")), rank(1, 2, Some("b"))]),
        exit: 1,
        took: PAIR,
        says: &[
            &["refused (claims rank 1): wrong or missing DDP_TOKEN", "rank 1 never joined"],
            &["rank 1 was refused by the store at 127.0.0.1:", "wrong or missing DDP_TOKEN"],
        ],
    },
    Case {
        name: "missing_ddp_token_is_refused",
        input: sample(SMALL),
        sets: &["ddp.timeout_s=5"],
        launch: Launch::Ranks(&[rank(0, 2, Some("a")), rank(1, 2, None)]),
        exit: 1,
        took: PAIR,
        says: &[
            &["refused (claims rank 1): wrong or missing DDP_TOKEN"],
            &["rank 1 was refused by the store at 127.0.0.1:", "wrong or missing DDP_TOKEN"],
        ],
    },
    // Rank 0 has no token but rank 1 has one: the store (rank 0's) lets rank 1 in, and rank 1's
    // ring listener refuses rank 0.
    Case {
        name: "ddp_token_only_on_rank_1_refuses_rank_0_on_the_ring",
        input: sample(SMALL),
        sets: &["ddp.timeout_s=5"],
        launch: Launch::Ranks(&[rank(0, 2, None), rank(1, 2, Some("b"))]),
        exit: 1,
        took: PAIR,
        says: &[
            &["rank 0 was refused by rank 1", "wrong or missing DDP_TOKEN"],
            &["wrong or missing DDP_TOKEN"],
        ],
    },
];
