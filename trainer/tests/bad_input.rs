//! Bad input, end to end: every case drives the real `ddp-trainer` binary and checks the exit code
//! (2 for configuration errors: spec, data, model, environment; 1 for runtime failures: peers,
//! rendezvous), that the message names the file / key / rank and says what to do, that nothing
//! hangs, and that nothing half-written is left in the run folder (no `model.safetensors`, no
//! checkpoint, no `.tmp` file).
//!
//! Most cases are rows of two tables, [`CONFIG_ERRORS`] and [`RENDEZVOUS_FAILURES`], each run by
//! one test; a failure names its case. The two cases that kill a replica mid-training are tests
//! of their own.

mod common;
use common::*;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Deadline for every process of a case (they should all fail well before it).
const QUICK: Duration = Duration::from_secs(30);

/// The shipped MNIST sample's training files.
const IMAGES: &str = "train-images-idx3-ubyte";
const LABELS: &str = "train-labels-idx1-ubyte";
const IMAGES_GZ: &str = "train-images-idx3-ubyte.gz";
const LABELS_GZ: &str = "train-labels-idx1-ubyte.gz";

/// A small, quick spec body for rendezvous failures (training never starts in these cases).
const SMALL: &str =
    "limit_train = 256\nlimit_test = 64\n[train]\nmax_steps = 2\n[checkpoint]\nevery_epochs = 0\n";

/// A spec body that trains long enough for a replica to be killed mid-training.
const LONG: &str = "limit_train = 4096\nlimit_test = 64\n[train]\nepochs = 3\nlog_every = 1\n[ddp]\ntimeout_s = 300\n[checkpoint]\nevery_epochs = 1\n";

/// One bad-input case: what the run folder's inputs are, how the trainer is started, and what
/// every process it starts must do.
struct Case {
    /// Named in failures.
    name: &'static str,
    input: Input,
    /// `--set` overrides, given to every process.
    sets: &'static [&'static str],
    launch: Launch,
    /// The exit code of every process.
    exit: i32,
    /// How long each process may take, from the start of the case.
    took: Range<Duration>,
    /// Per process (in launch order): substrings of its stderr. Placeholders: `{spec}`, `{data}`
    /// (the data directory), `{images}` / `{labels}` / `{images.gz}` (files in it), `{port}`
    /// (MASTER_PORT) and `{line:PREFIX}` (the 1-based line of the spec starting with PREFIX).
    says: &'static [&'static [&'static str]],
}

/// The spec, and the data it reads.
enum Input {
    /// `write_spec`: `model` reading the shipped MNIST sample, `body` appended.
    Sample {
        model: &'static str,
        body: &'static str,
    },
    /// An `mnist-cnn` spec reading the data directory `data` makes, `body` appended.
    Data { data: DataDir, body: &'static str },
}

/// A data directory made for a case.
enum DataDir {
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

/// A plain (not gzipped) IDX file.
enum Idx {
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
enum Launch {
    /// `ddp-trainer SPEC --out OUT`.
    Single,
    /// `ddp-trainer SPEC --standalone --nproc N --out OUT`.
    Standalone(usize),
    /// Ranks started side by side the way torchrun would, on a free MASTER_PORT.
    Ranks(&'static [Rank]),
    /// Rank 0 of 2 with a MASTER_PORT that another socket holds.
    BusyPort,
}

struct Rank {
    rank: usize,
    world: usize,
    /// `DDP_TOKEN` (None: unset).
    token: Option<&'static str>,
}

const fn rank(rank: usize, world: usize, token: Option<&'static str>) -> Rank {
    Rank { rank, world, token }
}

/// A configuration error fails fast, with exit code 2.
const CONFIG: Range<Duration> = Duration::ZERO..Duration::from_secs(20);

/// A configuration error of a single-process run.
const fn config_error(
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
const fn sample(body: &'static str) -> Input {
    Input::Sample {
        model: "mnist-cnn",
        body,
    }
}

/// An `mnist-cnn` spec with `body`, reading the data directory `data`.
const fn data(data: DataDir, body: &'static str) -> Input {
    Input::Data { data, body }
}

/// A copy of the sample without `skip`, plus `files`.
const fn edited(skip: &'static [&'static str], files: &'static [(&'static str, Idx)]) -> Input {
    data(DataDir::Edited { skip, files }, "")
}

const fn images(magic: u32, n: u32, h: u32, w: u32) -> Idx {
    short_images(magic, n, h, w, 0)
}

/// Images without their last `cut` bytes.
const fn short_images(magic: u32, n: u32, h: u32, w: u32, cut: usize) -> Idx {
    Idx::Images {
        magic,
        n,
        h,
        w,
        cut,
    }
}

const fn labels(n: u32) -> Idx {
    Idx::Labels { n, bad: None }
}

/// `n` labels, label `i` set to `v`.
const fn bad_label(n: u32, i: usize, v: u8) -> Idx {
    Idx::Labels {
        n,
        bad: Some((i, v)),
    }
}

/// Data, spec and launcher-environment errors: exit code 2, fast, nothing written.
#[rustfmt::skip]
const CONFIG_ERRORS: &[Case] = &[
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
const PAIR: Range<Duration> = Duration::ZERO..Duration::from_secs(12);

/// Peers and rendezvous: exit code 1, nothing written. `says` lists rank 0's messages first.
#[rustfmt::skip]
const RENDEZVOUS_FAILURES: &[Case] = &[
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

#[test]
fn config_errors() {
    run_cases(CONFIG_ERRORS);
}

#[test]
fn rendezvous_failures() {
    run_cases(RENDEZVOUS_FAILURES);
}

/// Runs every case (each in a fresh directory), then fails naming the cases that failed; each
/// failure's own message names its case too.
fn run_cases(cases: &[Case]) {
    let failed: Vec<&str> = cases
        .iter()
        .filter(|case| std::panic::catch_unwind(|| case.check()).is_err())
        .map(|case| case.name)
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}

/// The files of one case, for its placeholders.
struct Files {
    spec: PathBuf,
    /// The data directory (the shipped sample's for [`Input::Sample`]).
    data: PathBuf,
    port: u16,
}

impl Case {
    fn check(&self) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let spec = self.input.write(dir.path());
        let data = match &self.input {
            Input::Sample { .. } => mnist_dir(),
            Input::Data { data, .. } => dir.path().join(data.dir_name()),
        };
        let holder = matches!(self.launch, Launch::BusyPort)
            .then(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let port = match &holder {
            Some(h) => h.local_addr().unwrap().port(),
            None => free_port(),
        };
        let files = Files { spec, data, port };
        let start = Instant::now();
        let mut children = self.spawn(&files, &out);
        let outputs: Vec<(Output, Duration)> = children
            .iter_mut()
            .map(|c| (wait_output(c.take(), QUICK), start.elapsed()))
            .collect();
        drop(holder);
        assert_eq!(outputs.len(), self.says.len(), "[{}] processes", self.name);
        for (p, ((o, took), says)) in outputs.iter().zip(self.says).enumerate() {
            let name = format!("{} (process {p})", self.name);
            assert_exit(&name, o, self.exit);
            assert!(
                self.took.contains(took),
                "[{name}] took {took:?}, expected {:?}\n{}",
                self.took,
                text(o)
            );
            let e = stderr(o);
            for needle in *says {
                assert_says(&name, o, &e, &files.expand(needle));
            }
        }
        assert_nothing_half_written(self.name, &out);
    }

    /// Starts the trainer processes of the case, in launch order.
    fn spawn(&self, files: &Files, out: &Path) -> Vec<ChildGuard> {
        let single = |extra: &[&str]| {
            let mut c = trainer();
            c.arg(&files.spec).arg("--out").arg(out).args(extra);
            for s in self.sets {
                c.arg("--set").arg(s);
            }
            let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
            vec![child.unwrap()]
        };
        let ranks = |ranks: &[Rank]| {
            let ranks = ranks.iter().map(|r| {
                let env: Vec<(&str, &str)> =
                    r.token.map(|t| ("DDP_TOKEN", t)).into_iter().collect();
                spawn_rank(
                    &files.spec,
                    out,
                    r.rank,
                    r.world,
                    files.port,
                    &env,
                    self.sets,
                )
            });
            ranks.collect()
        };
        let children = match self.launch {
            Launch::Single => single(&[]),
            Launch::Standalone(n) => single(&["--standalone", "--nproc", &n.to_string()]),
            Launch::Ranks(r) => ranks(r),
            Launch::BusyPort => ranks(&[rank(0, 2, None)]),
        };
        children.into_iter().map(ChildGuard::new).collect()
    }
}

impl Files {
    /// `template` with its placeholders filled in.
    fn expand(&self, template: &str) -> String {
        let mut out = String::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = open + rest[open..].find('}').expect("placeholder without `}`");
            let key = &rest[open + 1..close];
            let value = match key {
                "spec" => self.spec.display().to_string(),
                "data" => self.data.display().to_string(),
                "images" => self.data.join(IMAGES).display().to_string(),
                "labels" => self.data.join(LABELS).display().to_string(),
                "images.gz" => self.data.join(IMAGES_GZ).display().to_string(),
                "port" => self.port.to_string(),
                _ => match key.strip_prefix("line:") {
                    Some(prefix) => line_of(&self.spec, prefix).to_string(),
                    None => panic!("unknown placeholder {{{key}}} in {template:?}"),
                },
            };
            out.push_str(&value);
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    }
}

impl Input {
    /// Writes the spec (and its data) into `dir`; returns the spec's path.
    fn write(&self, dir: &Path) -> PathBuf {
        match self {
            Input::Sample { model, body } => write_spec(dir, model, body),
            Input::Data { data, body } => {
                let path = dir.join(data.dir_name());
                data.make(&path);
                write_spec_reading(dir, "mnist-cnn", &path, body)
            }
        }
    }
}

impl DataDir {
    fn dir_name(&self) -> &'static str {
        match self {
            DataDir::Empty => "empty",
            DataDir::Missing => "no-such-dir",
            DataDir::TruncatedGzip | DataDir::Edited { .. } => "data",
        }
    }

    fn make(&self, data: &Path) {
        match self {
            DataDir::Empty => std::fs::create_dir(data).unwrap(),
            DataDir::Missing => {}
            DataDir::TruncatedGzip => {
                copy_mnist(data, &[]);
                let images = data.join(IMAGES_GZ);
                let len = std::fs::metadata(&images).unwrap().len();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&images)
                    .unwrap()
                    .set_len(len / 2)
                    .unwrap();
            }
            DataDir::Edited { skip, files } => {
                copy_mnist(data, skip);
                for (name, idx) in *files {
                    std::fs::write(data.join(name), idx.bytes()).unwrap();
                }
            }
        }
    }
}

impl Idx {
    fn bytes(&self) -> Vec<u8> {
        match *self {
            Idx::Images {
                magic,
                n,
                h,
                w,
                cut,
            } => {
                let mut b = idx_images(magic, n, h, w);
                b.truncate(b.len() - cut);
                b
            }
            Idx::Labels { n, bad } => {
                let mut b = idx_labels(n);
                if let Some((i, v)) = bad {
                    b[8 + i] = v;
                }
                b
            }
        }
    }
}

/// 1-based line of the first line of `file` that starts with `prefix`.
fn line_of(file: &Path, prefix: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in {text}"))
        + 1
}

/// Copies the shipped MNIST sample's files into `dst` (created), except those named in `skip`.
fn copy_mnist(dst: &Path, skip: &[&str]) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(mnist_dir()).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".gz") && !skip.contains(&name.as_str()) {
            std::fs::copy(e.path(), dst.join(&name)).unwrap();
        }
    }
}

/// A plain (not gzipped) IDX images file: `magic`, then n × h × w, then n·h·w pixel bytes.
fn idx_images(magic: u32, n: u32, h: u32, w: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [magic, n, h, w] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend((0..(n * h * w) as usize).map(|i| (i % 251) as u8));
    b
}

/// A plain IDX labels file with `n` labels 0..=9.
fn idx_labels(n: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x0000_0801u32.to_be_bytes());
    b.extend_from_slice(&n.to_be_bytes());
    b.extend((0..n).map(|i| (i % 10) as u8));
    b
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_exit(case: &str, o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "[{case}] expected exit code {code}, got {:?}\n{}",
        o.status,
        text(o)
    );
}

/// `needle` occurs in `haystack` (the process output), with the whole output on failure.
fn assert_says(case: &str, o: &Output, haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "[{case}] expected the message to contain {needle:?}\n{}",
        text(o)
    );
}

/// Nothing half-written in the run folder: no final model, no checkpoint, no temporary file.
/// (Metrics, TensorBoard events and logs are append-only records and may exist.)
fn assert_nothing_half_written(case: &str, out: &Path) {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, found);
            }
            found.push(p);
        }
    }
    let mut files = Vec::new();
    walk(out, &mut files);
    let bad: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name == "model.safetensors"
                || name.contains(".tmp")
                || p.starts_with(out.join("checkpoints")) && p.is_file()
        })
        .collect();
    assert!(
        bad.is_empty(),
        "[{case}] half-written output left in {}: {bad:?}",
        out.display()
    );
}

// ---------------------------------------------------------------------------------------------
// A replica killed mid-training (exit code 1 or EXIT_RESTART)
// ---------------------------------------------------------------------------------------------

#[test]
fn peer_killed_mid_training_is_named_at_once() {
    let case = "peer_killed_mid_training_is_named_at_once";
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", LONG);
    let out = dir.path().join("out");
    let port = free_port();
    let mut r0 = ChildGuard::new(spawn_rank(&spec, &out, 0, 2, port, &[], &[]));
    let mut r1 = ChildGuard::new(spawn_rank(&spec, &out, 1, 2, port, &[], &[]));
    wait_for_train_record(&out, 0, &mut r0, Duration::from_secs(120));
    r1.child().kill().unwrap();
    let killed = Instant::now();
    let o = wait_output(r0.take(), Duration::from_secs(60));
    let took = killed.elapsed();
    let _ = r1.take().wait();
    // A lost peer is the canonical transient failure: the "please restart" exit code.
    assert_exit(case, &o, ddp_trainer::error::EXIT_RESTART);
    assert!(
        took < Duration::from_secs(10),
        "rank 0 took {took:?} to notice (timeout_s = 300)\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(case, &o, &e, "failed on rank 0 (waiting for rank 1)");
    assert_says(case, &o, &e, "connection closed by rank 1");
    assert_nothing_half_written(case, &out);
}

#[test]
fn standalone_replica_killed_stops_the_others() {
    let case = "standalone_replica_killed_stops_the_others";
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", LONG);
    let out = dir.path().join("out");
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&out);
    let mut launcher = ChildGuard::new(
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_train_record(&out, 0, &mut launcher, Duration::from_secs(120));
    let replicas = child_pids(launcher.id());
    assert_eq!(
        replicas.len(),
        2,
        "expected 2 replicas under the launcher, found {replicas:?}"
    );
    let rank1 = *replicas
        .iter()
        .find(|&&p| proc_env(p, "RANK").as_deref() == Some("1"))
        .unwrap_or_else(|| panic!("no replica with RANK=1 among {replicas:?}"));
    // SAFETY: plain kill(2) on a pid we just found as our launcher's child.
    assert_eq!(unsafe { libc::kill(rank1 as i32, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    let o = wait_output(launcher.take(), Duration::from_secs(60));
    let took = killed.elapsed();
    assert_exit(case, &o, 1);
    assert!(
        took < Duration::from_secs(10),
        "the launcher took {took:?} to stop\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(
        case,
        &o,
        &e,
        &format!("rank 1 (pid {rank1}) was killed by signal 9 (SIGKILL)"),
    );
    assert_says(case, &o, &e, "logs/rank-1.log");
    let deadline = Instant::now() + Duration::from_secs(2);
    while replicas.iter().any(|&p| process_alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = replicas
        .iter()
        .copied()
        .filter(|&p| process_alive(p))
        .collect();
    assert!(
        alive.is_empty(),
        "replicas still running after the launcher exited: {alive:?}"
    );
    assert_nothing_half_written(case, &out);
}
