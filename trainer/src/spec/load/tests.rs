//! Reading specs and overrides: values, unknown keys, type errors, every key in KEYS.

use super::*;
use std::path::PathBuf;

const BASE: &str = r#"
name = "t"
[model]
name = "mnist-cnn"
[data]
name = "mnist"
path = "examples/data/mnist-sample"
[train]
epochs = 3
batch_size = 32
optimizer = "adam"
lr = 0.001
scheduler = { kind = "step", step_size = 1, gamma = 0.7 }
"#;

fn parse_err(text: &str, overrides: &[&str]) -> String {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    parse(text, &PathBuf::from("x.toml"), &o)
        .unwrap_err()
        .to_string()
}

#[test]
fn parses_base_with_defaults() {
    let s = parse(BASE, Path::new("x.toml"), &[]).unwrap();
    assert_eq!(s.train.epochs, 3);
    assert_eq!(s.train.scheduler.gamma, 0.7);
    assert_eq!(s.ddp.bucket_mb, crate::spec::BucketMb::Size(25.0));
    assert_eq!(s.ddp.timeout_s, 300);
    assert_eq!(s.checkpoint.keep_last, 3);
    assert_eq!(s.data.val_fraction, 0.1);
}

#[test]
fn unknown_key_names_line_and_suggests() {
    let text = BASE.replace("epochs = 3", "epoch = 3");
    let e = parse_err(&text, &[]);
    assert_eq!(
        e,
        "x.toml:9: unknown key `train.epoch`; did you mean `train.epochs`?"
    );
}

#[test]
fn unknown_section_is_rejected() {
    let e = parse_err(&format!("{BASE}\n[trian]\nepochs = 1\n"), &[]);
    assert_eq!(e, "x.toml:15: unknown key `trian`; did you mean `train`?");
}

#[test]
fn wrong_type_names_line() {
    let e = parse_err(
        &BASE.replace("batch_size = 32", "batch_size = \"big\""),
        &[],
    );
    assert!(e.starts_with("x.toml:10: "), "{e}");
    assert!(e.contains("invalid type"), "{e}");
}

#[test]
fn overrides_apply_and_are_typed() {
    let o = vec![
        "train.lr=0.01".to_string(),
        "train.optimizer=sgd".into(),
        "ddp.devices=[0, 1]".into(),
    ];
    let s = parse(BASE, Path::new("x.toml"), &o).unwrap();
    assert_eq!(s.train.lr, 0.01);
    assert_eq!(s.train.optimizer, super::super::OptimizerName::Sgd);
    assert_eq!(s.ddp.devices, super::super::Devices::Cuda(vec![0, 1]));
}

#[test]
fn override_of_unknown_key_suggests() {
    let e = parse_err(BASE, &["train.bach_size=3"]);
    assert_eq!(
        e,
        "x.toml: --set train.bach_size: no such key; did you mean `train.batch_size`?"
    );
}

#[test]
fn override_with_wrong_type_is_reported() {
    let e = parse_err(
        BASE,
        &["train.lr=0.1", "train.epochs=many", "ddp.timeout_s=5"],
    );
    assert!(
        e.starts_with("x.toml: --set train.epochs=many: invalid type"),
        "{e}"
    );
    let e = parse_err(BASE, &["model.name=vgg"]);
    assert!(
        e.starts_with("x.toml: --set model.name=vgg: unknown variant `vgg`"),
        "{e}"
    );
    assert!(e.contains("mnist-cnn") && e.contains("resnet18"), "{e}");
    let e = parse_err(BASE, &["train.scheduler.kind=fast"]);
    assert!(
        e.starts_with("x.toml: --set train.scheduler.kind=fast: unknown variant `fast`"),
        "{e}"
    );
    // An error in the file itself keeps its line when overrides are given too.
    let e = parse_err(
        &BASE.replace("batch_size = 32", "batch_size = \"big\""),
        &["train.lr=0.1"],
    );
    assert!(e.starts_with("x.toml:10: invalid type"), "{e}");
}

#[test]
fn batch_size_zero_is_rejected() {
    let e = parse_err(&BASE.replace("batch_size = 32", "batch_size = 0"), &[]);
    assert_eq!(
        e,
        "x.toml: train.batch_size: must be at least 1 (it is per replica)"
    );
}

#[test]
fn compression_needs_the_overlapped_step() {
    let e = parse_err(BASE, &["ddp.compression=\"bf16\"", "ddp.overlap=false"]);
    assert!(
        e.contains("ddp.compression") && e.contains("ddp.overlap = true"),
        "{e}"
    );
    let s = parse(
        BASE,
        Path::new("s.toml"),
        &["ddp.compression=\"fp16\"".to_string()],
    )
    .unwrap();
    assert_eq!(s.ddp.compression, crate::spec::Compression::Fp16);
    let e = parse_err(BASE, &["ddp.compression=\"zip\""]);
    assert!(e.contains("ddp.compression"), "{e}");
}

#[test]
fn powersgd_rank_and_automatic_buckets() {
    let ok = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        parse(BASE, Path::new("s.toml"), &sets).unwrap()
    };
    let s = ok(&["ddp.compression=\"powersgd\"", "ddp.powersgd_rank=2"]);
    assert_eq!(s.ddp.compression, crate::spec::Compression::Powersgd);
    assert_eq!(s.ddp.powersgd_rank, Some(2));
    let e = parse_err(BASE, &["ddp.powersgd_rank=2"]);
    assert!(
        e.contains("ddp.powersgd_rank") && e.contains("powersgd"),
        "{e}"
    );
    let e = parse_err(
        BASE,
        &["ddp.compression=\"powersgd\"", "ddp.powersgd_rank=0"],
    );
    assert!(
        e.contains("ddp.powersgd_rank") && e.contains("between 1 and 256"),
        "{e}"
    );
    let s = ok(&["ddp.bucket_mb=\"auto\""]);
    assert_eq!(s.ddp.bucket_mb, crate::spec::BucketMb::Auto);
    assert_eq!(
        ok(&["ddp.bucket_mb=4"]).ddp.bucket_mb,
        crate::spec::BucketMb::Size(4.0)
    );
    for bad in ["ddp.bucket_mb=\"big\"", "ddp.bucket_mb=-1"] {
        let e = parse_err(BASE, &[bad]);
        assert!(
            e.contains("ddp.bucket_mb") && e.contains("auto"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn recipe_keys_are_validated() {
    let cosine = "train.scheduler.kind=\"cosine\"";
    for (sets, want) in [
        (
            vec!["train.grad_clip=0.0"],
            "x.toml: train.grad_clip: must be a positive number (the largest global L2 norm of the gradients, e.g. 1.0), got 0; leave it out to not clip",
        ),
        (
            vec!["train.grad_clip=-1.0"],
            "x.toml: train.grad_clip: must be a positive number (the largest global L2 norm of the gradients, e.g. 1.0), got -1; leave it out to not clip",
        ),
        (
            vec!["train.grad_clip=inf"],
            "x.toml: train.grad_clip: must be a positive number (the largest global L2 norm of the gradients, e.g. 1.0), got inf; leave it out to not clip",
        ),
        (
            vec!["train.steps=0"],
            "x.toml: train.steps: must be at least 1 (the number of optimizer steps to train)",
        ),
        (
            vec!["train.steps=50", "train.epochs=3"],
            "x.toml: train.steps: and train.epochs are both set (50 steps, 3 epochs): the run is counted in one of them, so keep one",
        ),
        (
            vec!["checkpoint.every_steps=0"],
            "x.toml: checkpoint.every_steps: must be at least 1 step",
        ),
        (
            vec![
                "train.steps=50",
                "train.epochs=1",
                "train.scheduler.warmup_steps=51",
            ],
            "x.toml: train.scheduler.warmup_steps: 51 is more than train.steps = 50: warm up over at most the run's steps",
        ),
        (
            vec![
                "train.scheduler.warmup_steps=10",
                "train.scheduler.warmup_epochs=0.5",
            ],
            "x.toml: train.scheduler.warmup_steps: and train.scheduler.warmup_epochs are both set (10 steps, 0.5 epochs): keep one of them",
        ),
        (
            vec![cosine, "train.scheduler.min_lr=0.01"],
            "x.toml: train.scheduler.min_lr: 0.01 is more than train.lr = 0.001: the cosine schedule decays from train.lr down to min_lr, so set min_lr at most train.lr",
        ),
    ] {
        assert_eq!(parse_err(BASE, &sets), want, "{sets:?}");
    }
    let ok = [
        "train.steps=50",
        "train.epochs=1",
        "train.scheduler.warmup_steps=50",
        cosine,
        "train.scheduler.min_lr=0.001",
        "train.grad_clip=1.0",
        "train.decay_all=true",
    ];
    let o: Vec<String> = ok.iter().map(|s| s.to_string()).collect();
    let s = parse(BASE, Path::new("x.toml"), &o).unwrap();
    assert_eq!(s.train.steps, Some(50));
    assert_eq!(s.train.scheduler.warmup_steps, Some(50));
    assert_eq!(s.train.grad_clip, Some(1.0));
    assert!(s.train.decay_all);
}

#[test]
fn recipe_keys_left_out_keep_the_hash() {
    // Specs written before these keys existed resume: unset, they are not rendered.
    let s = parse(BASE, Path::new("x.toml"), &[]).unwrap();
    let toml = s.to_toml();
    for key in ["steps", "grad_clip", "decay_all", "warmup_steps"] {
        assert!(!toml.contains(key), "{key} rendered:\n{toml}");
    }
}

#[test]
fn unknown_model_lists_choices() {
    let e = parse_err(&BASE.replace("name = \"mnist-cnn\"", "name = \"vgg\""), &[]);
    assert!(e.starts_with("x.toml:4: unknown variant `vgg`"), "{e}");
    assert!(e.contains("mnist-cnn") && e.contains("resnet18"), "{e}");
}

/// Every key in KEYS is accepted by serde, and every field serde knows is in KEYS.
#[test]
fn keys_match_the_spec_struct() {
    let full = r#"
name = "all"
[model]
name = "linear"
[data]
name = "synthetic"
path = "p"
val_fraction = 0.0
augment = false
limit_train = 10
limit_test = 10
task = "regression"
shape = [1, 1, 10]
classes = 0
train_size = 10
test_size = 10
noise = 0.1
[train]
epochs = 1
steps = 5
batch_size = 1
optimizer = "sgd"
lr = 0.1
lr_scaling = "linear"
momentum = 0.9
nesterov = true
weight_decay = 0.0
decay_all = true
grad_clip = 1.0
betas = [0.9, 0.99]
eps = 1e-8
seed = 3
grad_accum = 2
max_steps = 5
log_every = 1
[train.scheduler]
kind = "cosine"
step_size = 1
gamma = 0.5
min_lr = 0.0
warmup_epochs = 0.0
warmup_steps = 2
[ddp]
replicas = 2
backend = "tcp"
devices = "cpu"
bucket_mb = 1.0
timeout_s = 5
sync_batchnorm = true
broadcast_buffers = false
threads = 1
shared_memory = false
overlap = false
[checkpoint]
every_epochs = 1
keep_last = 1
[restart]
max_restarts = 3
backoff_s = 0.5
[slurm]
nodes = 1
gpus_per_node = 2
partition = "gpu"
time = "1:00:00"
account = "lab"
qos = "normal"
constraint = "a100"
sbatch_args = ["--mem=8G"]
warn_s = 60
[spark]
master = "local[2]"
tasks = 2
gpus_per_task = 1
wait_s = 60
conf = { "spark.executor.memory" = "1g" }
"#;
    // The language-model keys, which image data refuses, from a second spec.
    let language_model = r#"
name = "lm"
[model]
name = "gpt"
layers = 1
heads = 1
embd = 8
block = 4
dropout = 0.1
[data]
name = "tokens"
path = "p"
dtype = "u32"
vocab_size = 10
[train]
steps = 10
eval_every = 5
precision = "fp16"
loss_scale = 1024.0
loss_scale_growth_every = 100
[checkpoint]
every_steps = 5
"#;
    let images = r#"
name = "images"
[model]
name = "mnist-cnn"
[data]
name = "image-folder"
path = "p"
test_fraction = 0.1
channels = 1
size = [28, 28]
mean = [0.5]
std = [0.25]
workers = 2
cache = "memory"
skip_bad = true
[ddp]
compression = "bf16"
"#;
    let table = r#"
name = "table"
[model]
name = "mlp"
hidden = [64]
[data]
name = "parquet"
path = "t.parquet"
target = "y"
features = ["a"]
normalize = true
"#;
    let tensors = r#"
name = "tensors"
[model]
name = "mlp"
[data]
name = "tensors"
path = "t.npz"
x_key = "images"
y_key = "labels"
"#;
    let mut seen = Vec::new();
    for (text, file) in [
        (full, "all.toml"),
        (language_model, "lm.toml"),
        (images, "images.toml"),
        (table, "table.toml"),
        (tensors, "tensors.toml"),
    ] {
        let s = parse(text, Path::new(file), &[]).unwrap();
        let rendered: Table = s.to_toml().parse().unwrap();
        flatten(&rendered, "", &mut seen);
    }
    seen.sort();
    seen.dedup();
    let text = parse(
        &language_model
            .replace("\"tokens\"", "\"text\"")
            .replace("dtype = \"u32\"\nvocab_size = 10", "tokenizer = \"byte\""),
        Path::new("text.toml"),
        &[],
    )
    .unwrap();
    if text.data.tokenizer.is_some() {
        seen.push("data.tokenizer".into());
    }
    let power = [
        "ddp.compression=\"powersgd\"",
        "ddp.powersgd_rank=2",
        "ddp.elastic.min_replicas=1",
    ]
    .map(String::from);
    let rendered: Table = parse(images, Path::new("p.toml"), &power)
        .unwrap()
        .to_toml()
        .parse()
        .unwrap();
    flatten(&rendered, "", &mut seen);
    let streaming = [
        "ddp.sync.method=\"streaming\"",
        "ddp.sync.every=8",
        "ddp.sync.warmup_steps=2",
        "ddp.sync.outer_lr=0.7",
        "ddp.sync.outer_momentum=0.9",
        "ddp.sync.fragments=2",
        "ddp.sync.delay=1",
        "ddp.sync.mixing=0.5",
        "ddp.sync.encoding=\"int4\"",
        "ddp.sync.error_feedback=true",
    ]
    .map(String::from);
    let rendered: Table = parse(tensors, Path::new("s.toml"), &streaming)
        .unwrap()
        .to_toml()
        .parse()
        .unwrap();
    flatten(&rendered, "", &mut seen);
    let mut keys: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    keys.sort();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, keys);
}

fn flatten(t: &Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in t {
        let full = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            // `spark.conf` is one key: a table of Spark's own keys.
            Value::Table(t) if full != "spark.conf" => flatten(t, &full, out),
            _ => out.push(full),
        }
    }
}

#[test]
fn hash_ignores_launch_settings_only() {
    let a = parse(BASE, Path::new("x.toml"), &[]).unwrap();
    let b = parse(BASE, Path::new("x.toml"), &["ddp.timeout_s=5".into()]).unwrap();
    let c = parse(BASE, Path::new("x.toml"), &["train.lr=0.5".into()]).unwrap();
    let d = parse(
        BASE,
        Path::new("x.toml"),
        &[
            "checkpoint.every_steps=7".into(),
            "checkpoint.keep_last=0".into(),
        ],
    )
    .unwrap();
    assert_eq!(a.hash(), b.hash());
    assert_eq!(a.hash(), d.hash());
    assert_ne!(a.hash(), c.hash());
}

#[test]
fn elastic_minimum_and_its_rules() {
    let with = |extra: &str, sets: &[&str]| {
        let text = format!("{BASE}{extra}");
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        parse(&text, Path::new("s.toml"), &sets)
    };
    let s = with("", &["ddp.replicas=4", "ddp.elastic.min_replicas=2"]).unwrap();
    assert_eq!(
        s.ddp.elastic,
        Some(crate::spec::Elastic { min_replicas: 2 })
    );
    assert_eq!(with("", &["ddp.replicas=4"]).unwrap().ddp.elastic, None);
    let e = parse_err(BASE, &["ddp.replicas=2", "ddp.elastic.min_replicas=3"]);
    assert!(
        e.contains("ddp.elastic.min_replicas")
            && e.contains("between 1 and ddp.replicas (2), got 3"),
        "{e}"
    );
    let e = parse_err(
        BASE,
        &[
            "ddp.replicas=2",
            "ddp.elastic.min_replicas=1",
            "ddp.overlap=false",
        ],
    );
    assert!(
        e.contains("ddp.elastic") && e.contains("ddp.overlap = true"),
        "{e}"
    );
    let e = parse_err(
        BASE,
        &[
            "ddp.replicas=2",
            "ddp.elastic.min_replicas=1",
            "ddp.backend=\"nccl\"",
        ],
    );
    assert!(e.contains("ddp.backend = \"tcp\""), "{e}");
    let e = with("", &["ddp.replicas=2", "ddp.elastic.min=1"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("ddp.elastic.min"), "{e}");
}
