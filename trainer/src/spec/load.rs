//! Reading a spec: TOML syntax, unknown keys (with line and suggestion), `--set` overrides, types.

use std::path::Path;

use toml::{Table, Value};

use super::Spec;
use crate::{Error, Result};

/// Every key a spec may contain, dotted. `--set` accepts exactly these; anything else in a file is
/// rejected with the closest match. (A unit test keeps this list and [`Spec`] in step.)
pub const KEYS: &[&str] = &[
    "name",
    "model.name",
    "model.layers",
    "model.heads",
    "model.embd",
    "model.block",
    "model.dropout",
    "model.hidden",
    "data.name",
    "data.path",
    "data.val_fraction",
    "data.augment",
    "data.limit_train",
    "data.limit_test",
    "data.task",
    "data.shape",
    "data.classes",
    "data.train_size",
    "data.test_size",
    "data.noise",
    "data.tokenizer",
    "data.dtype",
    "data.vocab_size",
    "data.test_fraction",
    "data.channels",
    "data.size",
    "data.mean",
    "data.std",
    "data.normalize",
    "data.workers",
    "data.cache",
    "data.skip_bad",
    "data.target",
    "data.features",
    "data.x_key",
    "data.y_key",
    "train.epochs",
    "train.steps",
    "train.batch_size",
    "train.optimizer",
    "train.lr",
    "train.lr_scaling",
    "train.momentum",
    "train.nesterov",
    "train.weight_decay",
    "train.decay_all",
    "train.grad_clip",
    "train.betas",
    "train.eps",
    "train.scheduler.kind",
    "train.scheduler.step_size",
    "train.scheduler.gamma",
    "train.scheduler.min_lr",
    "train.scheduler.warmup_epochs",
    "train.scheduler.warmup_steps",
    "train.seed",
    "train.grad_accum",
    "train.max_steps",
    "train.log_every",
    "train.eval_every",
    "ddp.replicas",
    "ddp.backend",
    "ddp.devices",
    "ddp.bucket_mb",
    "ddp.timeout_s",
    "ddp.sync_batchnorm",
    "ddp.broadcast_buffers",
    "ddp.threads",
    "ddp.shared_memory",
    "ddp.overlap",
    "ddp.compression",
    "ddp.powersgd_rank",
    "checkpoint.every_epochs",
    "checkpoint.keep_last",
    "checkpoint.every_steps",
    "restart.max_restarts",
    "restart.backoff_s",
    "slurm.nodes",
    "slurm.gpus_per_node",
    "slurm.partition",
    "slurm.time",
    "slurm.account",
    "slurm.qos",
    "slurm.constraint",
    "slurm.sbatch_args",
    "slurm.warn_s",
];

impl Spec {
    /// Reads, overrides and validates a spec file.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Spec> {
        load(path, overrides)
    }

    /// Parses and validates spec text as if it were the file `path` (named in messages; relative
    /// data paths are resolved against its folder, as [`Spec::load`] does), e.g. a spec written
    /// in a notebook cell. The file need not exist.
    pub fn parse_at(text: &str, path: &Path, overrides: &[String]) -> Result<Spec> {
        parse_at(text, path, overrides)
    }

    /// Parses and validates spec text; `file` is only used in messages.
    pub fn parse(text: &str, file: &Path, overrides: &[String]) -> Result<Spec> {
        parse(text, file, overrides)
    }
}

fn load(path: &Path, overrides: &[String]) -> Result<Spec> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_at(&text, path, overrides)
}

/// [`parse`], then relative data paths resolved as for a spec file at `path` (which need not
/// exist: a spec written in a notebook cell is resolved against the notebook's folder).
fn parse_at(text: &str, path: &Path, overrides: &[String]) -> Result<Spec> {
    let mut spec = parse(text, path, overrides)?;
    if let Some(p) = &spec.data.path {
        spec.data.path = Some(resolve_data_path(path, p));
    }
    Ok(spec)
}

/// Relative data paths are tried against the spec's folder, then taken as given (cwd-relative).
fn resolve_data_path(spec_path: &Path, data: &Path) -> std::path::PathBuf {
    if data.is_absolute() {
        return data.to_path_buf();
    }
    if let Some(dir) = spec_path.parent() {
        let beside = dir.join(data);
        if beside.exists() {
            return beside;
        }
    }
    data.to_path_buf()
}

fn parse(text: &str, file: &Path, overrides: &[String]) -> Result<Spec> {
    let spec_err = |line: Option<usize>, key: &str, msg: String| Error::Spec {
        file: file.to_path_buf(),
        line,
        key: key.to_string(),
        msg,
    };
    let mut table: Table = text.parse().map_err(|e: toml::de::Error| {
        spec_err(e.span().map(|s| line_of(text, s.start)), "", clean(&e))
    })?;
    check_keys(&table, "", text, file)?;
    for o in overrides {
        let (key, value) =
            parse_override(o).map_err(|msg| spec_err(None, o, format!("--set {o}: {msg}")))?;
        if !KEYS.contains(&key.as_str()) {
            return Err(spec_err(
                None,
                &key,
                format!(
                    "--set {key}: no such key{}",
                    suggestion(&key, KEYS.iter().copied())
                ),
            ));
        }
        set_path(&mut table, &key, value)
            .map_err(|msg| spec_err(None, &key, format!("--set {key}: {msg}")))?;
    }
    let spec: Spec = if overrides.is_empty() {
        toml::from_str(text)
            .map_err(|e| spec_err(e.span().map(|s| line_of(text, s.start)), "", clean(&e)))?
    } else {
        // Re-render so a type error can be traced to its key: an override's is reported as
        // `--set KEY=VALUE: ...`, one of the file's own keys at its line in the file.
        let rendered = toml::to_string(&table).expect("a toml Table always renders");
        toml::from_str(&rendered).map_err(|e| {
            let key = e
                .span()
                .and_then(|s| key_at(&rendered, s.start))
                .unwrap_or_default();
            let culprit = overrides.iter().rev().find(|o| {
                let k = o.split_once('=').map_or(o.as_str(), |(k, _)| k).trim();
                !key.is_empty() && (k == key || k.starts_with(&format!("{key}.")))
            });
            match (culprit, toml::from_str::<Spec>(text)) {
                (Some(o), _) => spec_err(None, &key, format!("--set {o}: {}", clean(&e))),
                // The file alone fails the same way: the problem is the file's, at its line.
                (None, Err(fe)) if clean(&fe) == clean(&e) => {
                    spec_err(fe.span().map(|s| line_of(text, s.start)), &key, clean(&fe))
                }
                _ => spec_err(None, &key, format!("after --set overrides: {}", clean(&e))),
            }
        })?
    };
    let mut spec = spec;
    spec.source = file.to_path_buf();
    spec.check()?;
    Ok(spec)
}

/// `key=value` → (key, TOML value). The value is read as TOML (`3`, `0.1`, `true`, `[0, 1]`,
/// `"adam"`), and a bare word that is not TOML is taken as a string (`train.optimizer=adam`).
pub fn parse_override(o: &str) -> std::result::Result<(String, Value), String> {
    let (key, raw) = o
        .split_once('=')
        .ok_or("expected key=value, e.g. train.lr=0.01")?;
    let key = key.trim().to_string();
    if key.is_empty() {
        return Err("empty key".into());
    }
    let raw = raw.trim();
    let value = match format!("v = {raw}").parse::<Table>() {
        Ok(mut t) => t.remove("v").expect("parsed v"),
        Err(_) => Value::String(raw.to_string()),
    };
    Ok((key, value))
}

fn set_path(table: &mut Table, key: &str, value: Value) -> std::result::Result<(), String> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("split yields one part");
    let mut cur = table;
    for p in parts {
        let entry = cur
            .entry(p.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{p}` is not a table in the spec"))?;
    }
    cur.insert(last.to_string(), value);
    Ok(())
}

/// Rejects keys that are not in [`KEYS`], naming the line and the closest known key.
fn check_keys(table: &Table, prefix: &str, text: &str, file: &Path) -> Result<()> {
    for (k, v) in table {
        let full = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let is_section = KEYS
            .iter()
            .any(|known| known.starts_with(&format!("{full}.")));
        if is_section {
            if let Value::Table(t) = v {
                check_keys(t, &full, text, file)?;
                continue;
            }
            return Err(Error::Spec {
                file: file.to_path_buf(),
                line: find_key_line(text, k),
                key: full.clone(),
                msg: format!("`{full}` must be a table (e.g. [{full}])"),
            });
        }
        if !KEYS.contains(&full.as_str()) {
            let depth = full.split('.').count();
            let mut siblings: Vec<String> = KEYS
                .iter()
                .filter(|known| known.starts_with(prefix))
                .map(|known| known.split('.').take(depth).collect::<Vec<_>>().join("."))
                .collect();
            siblings.dedup();
            return Err(Error::Spec {
                file: file.to_path_buf(),
                line: find_key_line(text, k),
                key: full.clone(),
                msg: format!(
                    "unknown key `{full}`{}",
                    suggestion(&full, siblings.iter().map(String::as_str))
                ),
            });
        }
    }
    Ok(())
}

fn suggestion<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    let best = candidates
        .map(|c| (edit_distance(key, c), c))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, c)| *d <= (c.len() / 3).max(2));
    match best {
        Some((_, c)) => format!("; did you mean `{c}`?"),
        None => "; see docs/spec.md for the keys".to_string(),
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The dotted key (`train.epochs`) on the line holding byte `offset` of a rendered document
/// (`key = value` lines under `[section]` headers); None when that line holds no `=`.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = &text[..offset.min(text.len())];
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let (key, _) = text[start..].lines().next()?.split_once('=')?;
    let key = key.trim().trim_matches('"');
    let section = before[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && l.ends_with(']'));
    Some(
        match section.map(|s| s.trim_matches(|c| c == '[' || c == ']').trim()) {
            Some(s) if !s.is_empty() => format!("{s}.{key}"),
            _ => key.to_string(),
        },
    )
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// First line whose key (before `=`, or a `[table]` header) is `key`.
fn find_key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim();
            let head = l.split('=').next().unwrap_or("").trim().trim_matches('"');
            let header = l.trim_start_matches('[').trim_end_matches(']').trim();
            head == key || header.rsplit('.').next() == Some(key) && l.starts_with('[')
        })
        .map(|i| i + 1)
}

/// toml's message without its multi-line source excerpt (we print file:line ourselves).
fn clean(e: &toml::de::Error) -> String {
    e.message().trim().to_string()
}

#[cfg(test)]
mod tests {
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
        let power = ["ddp.compression=\"powersgd\"", "ddp.powersgd_rank=2"].map(String::from);
        let rendered: Table = parse(images, Path::new("p.toml"), &power)
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
                Value::Table(t) => flatten(t, &full, out),
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
}
