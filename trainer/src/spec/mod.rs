//! The experiment spec: a TOML file describing model, data, training recipe and DDP settings.
//!
//! Layout:
//! - this module: the typed [`Spec`] and its defaults, semantic validation, [`Spec::hash`].
//! - `ddp`: the `[ddp]` table (backend, devices, buckets, compression) and its values' types.
//! - `slurm`: the `[slurm]` table (`ddp run --on slurm`) and its rules.
//! - `spark`: the `[spark]` table (`ddp run --on spark`) and its rules.
//! - `sync`: `[ddp.sync]` (every step, or local steps with a sync every N: model averaging,
//!   DiLoCo, Streaming DiLoCo; the syncs' encoding) and its rules.
//! - `precision`: `train.precision` (mixed precision) and the fp16 loss scaler's keys, and their
//!   rules.
//! - `load`: reading a file ([`Spec::load`], [`Spec::parse`]), `--set key=value` overrides,
//!   unknown keys rejected with the line and a suggestion, type errors with the line and the
//!   expected type.
//!
//! Every key is documented in `docs/spec.md`.

mod ddp;
mod language_model;
mod load;
mod own_data;
mod precision;
mod slurm;
mod spark;
mod sync;
mod text_keys;

pub use ddp::{Backend, BucketMb, Compression, DdpSpec, DeviceKeyword, Devices, Elastic};
pub use load::{KEYS, edit_distance, parse_override};
pub use precision::Precision;
pub use slurm::{DEFAULT_WARN_S, SlurmSpec, slurm_time};
pub use spark::SparkSpec;
pub use sync::{LocalSync, SyncEncoding, SyncMethod, SyncSpec};
pub use text_keys::{TokenDtype, TokenizerKind};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The file this spec was read from (for messages); not part of the spec itself.
    #[serde(skip)]
    pub source: PathBuf,
    pub name: String,
    pub model: ModelSpec,
    pub data: DataSpec,
    #[serde(default)]
    pub train: TrainSpec,
    #[serde(default)]
    pub ddp: DdpSpec,
    #[serde(default)]
    pub checkpoint: CheckpointSpec,
    #[serde(default)]
    pub restart: RestartSpec,
    /// Where the run goes on Slurm (`ddp run --on slurm`); not part of [`Spec::hash`].
    #[serde(default, skip_serializing_if = "SlurmSpec::is_empty")]
    pub slurm: SlurmSpec,
    /// Where the run goes on Spark (`ddp run --on spark`); not part of [`Spec::hash`].
    #[serde(default, skip_serializing_if = "SparkSpec::is_empty")]
    pub spark: SparkSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelName {
    MnistCnn,
    Mlp,
    ConvnetBn,
    Resnet18,
    Resnet50,
    Linear,
    /// The user's model: the trainer executable is one made with `ddp_trainer::main_with`.
    Custom,
    /// A GPT language model (token ids in, next-token logits out) for `text` and `tokens` data.
    Gpt,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub name: ModelName,
    /// `gpt`: transformer blocks (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    /// `gpt`: attention heads per block; must divide `embd` (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<usize>,
    /// `gpt`: channels of the embeddings and the residual stream (default 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embd: Option<usize>,
    /// `gpt`: context length in tokens, the positions the model learns (default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<usize>,
    /// `gpt`: dropout probability while training (default 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f64>,
    /// `mlp`: the hidden layers' widths (default `[512, 512]`, the tutorial's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Vec<usize>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataName {
    Mnist,
    FashionMnist,
    Cifar10,
    Synthetic,
    /// A UTF-8 text file (`path`), tokenized by `tokenizer`, for language models.
    Text,
    /// Pre-tokenized `train.bin` and `val.bin` in the folder `path` (`dtype`, `vocab_size`).
    Tokens,
    /// torchvision's `ImageFolder`: `path/train/<class>/*` images (and `path/test/<class>/*`).
    ImageFolder,
    /// A CSV table (`path` a file, or a folder with `train.csv` and `test.csv`).
    Csv,
    /// A Parquet table (`path` a file, or a folder with `train.parquet` and `test.parquet`).
    Parquet,
    /// Arrays in a `.safetensors`, `.npz` or `.npy` file, memory-mapped.
    Tensors,
    /// The data set of the trainer executable (`ddp_trainer::Trainer::dataset`).
    Custom,
}

impl DataName {
    /// Token streams for a language model (rather than samples with targets).
    pub fn is_text(self) -> bool {
        matches!(self, DataName::Text | DataName::Tokens)
    }

    /// Tables: `csv` and `parquet`.
    pub fn is_table(self) -> bool {
        matches!(self, DataName::Csv | DataName::Parquet)
    }

    /// The user's own data on disk, which may have no test part (then `data.test_fraction`).
    pub fn is_own_files(self) -> bool {
        matches!(
            self,
            DataName::ImageFolder | DataName::Csv | DataName::Parquet | DataName::Tensors
        )
    }
}

/// `data.normalize`: `true`/`false`, or `"auto"` (an image folder's mean and std per channel,
/// computed over the training split).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Normalize {
    Flag(bool),
    Keyword(NormalizeKeyword),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NormalizeKeyword {
    Auto,
}

/// `data.cache`: keep decoded samples in memory when they fit (`auto`), always, or never.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    #[default]
    Auto,
    Memory,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SyntheticTask {
    #[default]
    Classification,
    Regression,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    pub name: DataName,
    /// Folder with the data files (relative paths are resolved against the spec's folder first,
    /// then the current directory). Not used by `synthetic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    #[serde(default = "defaults::val_fraction")]
    pub val_fraction: f64,
    /// CIFAR augmentation (random crop with 4-pixel padding + horizontal flip); default: on for cifar10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub augment: Option<bool>,
    /// Use only the first N training samples (before the validation split); for quick tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_train: Option<usize>,
    /// Use only the first N test samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_test: Option<usize>,
    /// Classification or regression: synthetic data's kind, a table's target column's meaning.
    #[serde(default)]
    pub task: SyntheticTask,
    /// Synthetic sample shape [C, H, W]; default: what the model expects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<[usize; 3]>,
    #[serde(default = "defaults::classes")]
    pub classes: usize,
    #[serde(default = "defaults::train_size")]
    pub train_size: usize,
    #[serde(default = "defaults::test_size")]
    pub test_size: usize,
    #[serde(default = "defaults::noise")]
    pub noise: f32,
    /// `text`: `char` (the text's sorted distinct characters) or `byte` (256 ids); default char.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<TokenizerKind>,
    /// `tokens`: the id type of `train.bin`/`val.bin`, `u16` (default) or `u32`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<TokenDtype>,
    /// `tokens`: the number of distinct ids (every id in the files must be below it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<usize>,
    /// Own files without a test part: the share held out as the test split, seeded (default
    /// 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_fraction: Option<f64>,
    /// `image-folder`: 1 (grayscale) or 3 (RGB); images are converted (default: the first
    /// image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<usize>,
    /// `image-folder`: `[H, W]`: resize the shorter side, then centre-crop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<[usize; 2]>,
    /// `image-folder`: per-channel mean subtracted after scaling pixels to [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<Vec<f32>>,
    /// `image-folder`: per-channel standard deviation divided by (with `mean`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<Vec<f32>>,
    /// `image-folder`: `"auto"`; tables: `true` (standardise with the training split's figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<Normalize>,
    /// Threads per replica that fill batches ahead (default: what the machine can spare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// `image-folder`: keep decoded samples in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheMode>,
    /// `image-folder`: skip corrupt or unreadable images (counted) instead of refusing them.
    #[serde(default, skip_serializing_if = "defaults::is_no")]
    pub skip_bad: bool,
    /// Tables: the label column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Tables: the input columns (default: every other numeric column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    /// `tensors`: the inputs' key (default `x`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_key: Option<String>,
    /// `tensors`: the targets' key (default `y`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerName {
    Sgd,
    Adam,
    Adamw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LrScaling {
    #[default]
    None,
    /// lr × world size (Goyal et al.), as the reference recipes do.
    Linear,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerKind {
    #[default]
    Constant,
    /// lr × gamma every `step_size` epochs (PyTorch StepLR, stepped per epoch).
    Step,
    /// Cosine annealing from lr to `min_lr`: per optimizer step over `train.steps` where that is
    /// set, else per epoch over the run's epochs.
    Cosine,
    /// Constant after a linear warm-up of `warmup_epochs`.
    LinearWarmup,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSpec {
    #[serde(default)]
    pub kind: SchedulerKind,
    #[serde(default = "defaults::one_usize")]
    pub step_size: usize,
    #[serde(default = "defaults::gamma")]
    pub gamma: f64,
    #[serde(default)]
    pub min_lr: f64,
    /// Linear warm-up (per step, from lr/steps to lr) over this many epochs; any kind.
    #[serde(default)]
    pub warmup_epochs: f64,
    /// Linear warm-up over this many optimizer steps instead (not with `warmup_epochs`); any
    /// kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_steps: Option<u64>,
}

impl Default for SchedulerSpec {
    fn default() -> Self {
        Self {
            kind: SchedulerKind::Constant,
            step_size: 1,
            gamma: defaults::gamma(),
            min_lr: 0.0,
            warmup_epochs: 0.0,
            warmup_steps: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    #[serde(default = "defaults::one_usize")]
    pub epochs: usize,
    /// The run's length in optimizer steps instead of `epochs` (required for text data). The
    /// cosine schedule decays per step over it ([`SchedulerKind::Cosine`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// Per replica.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: usize,
    #[serde(default = "defaults::optimizer")]
    pub optimizer: OptimizerName,
    #[serde(default = "defaults::lr")]
    pub lr: f64,
    #[serde(default)]
    pub lr_scaling: LrScaling,
    #[serde(default)]
    pub momentum: f64,
    #[serde(default)]
    pub nesterov: bool,
    /// L2 penalty (SGD, Adam: every tensor) or decoupled decay (AdamW, default 0.01 there:
    /// tensors of rank ≥ 2 only, unless `decay_all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    /// AdamW: decay every tensor, biases and normalisation weights too.
    #[serde(default, skip_serializing_if = "defaults::is_no")]
    pub decay_all: bool,
    /// Scale the averaged gradients down to this global L2 norm where it is larger, before the
    /// optimizer step (PyTorch's `clip_grad_norm_`); unset: no clipping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_clip: Option<f64>,
    #[serde(default = "defaults::betas")]
    pub betas: [f64; 2],
    #[serde(default = "defaults::eps")]
    pub eps: f64,
    #[serde(default)]
    pub scheduler: SchedulerSpec,
    #[serde(default = "defaults::seed")]
    pub seed: u64,
    /// Micro-batches per optimizer step; gradients are synchronised only on the last (no_sync).
    #[serde(default = "defaults::one_usize")]
    pub grad_accum: usize,
    /// Stop after this many optimizer steps in total (for tests and smoke runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
    /// Progress line + train metric every N optimizer steps (0: about 10 per epoch).
    #[serde(default)]
    pub log_every: usize,
    /// Evaluate on the validation part every N optimizer steps (and at the end); default: every
    /// `steps / 10` steps for a step budget, once per epoch otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_every: Option<u64>,
    /// The dtype of the matrix products and convolutions (mixed precision, [`Precision`]).
    #[serde(default, skip_serializing_if = "Precision::is_f32")]
    pub precision: Precision,
    /// fp16: the loss scale to start from (default 65536, `torch.amp.GradScaler`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// fp16: the loss scale doubles after this many finite steps in a row (default 2000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale_growth_every: Option<u64>,
}

impl Default for TrainSpec {
    fn default() -> Self {
        toml::from_str("").expect("train defaults")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Write a checkpoint every N epochs (0: only the final model).
    #[serde(default = "defaults::one_usize")]
    pub every_epochs: usize,
    #[serde(default = "defaults::keep_last")]
    pub keep_last: usize,
    /// Write a checkpoint every N optimizer steps (language models' default: at each
    /// evaluation; sample data: none, mid-epoch checkpoints beside the epochs' ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_steps: Option<u64>,
}

impl Default for CheckpointSpec {
    fn default() -> Self {
        toml::from_str("").expect("checkpoint defaults")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartSpec {
    #[serde(default)]
    pub max_restarts: u32,
    #[serde(default = "defaults::backoff_s")]
    pub backoff_s: f64,
}

impl Default for RestartSpec {
    fn default() -> Self {
        toml::from_str("").expect("restart defaults")
    }
}

impl RestartSpec {
    /// How long after a failure the replicas (or, in an elastic run, the failed replica) start
    /// again: `restart.backoff_s`, read as a duration in this one place (negative: none).
    pub fn backoff(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.backoff_s.max(0.0))
    }
}

mod defaults {
    use super::OptimizerName;
    pub fn val_fraction() -> f64 {
        0.1
    }
    pub fn classes() -> usize {
        10
    }
    pub fn train_size() -> usize {
        2048
    }
    pub fn test_size() -> usize {
        512
    }
    pub fn noise() -> f32 {
        0.5
    }
    pub fn one_usize() -> usize {
        1
    }
    pub fn gamma() -> f64 {
        0.1
    }
    pub fn batch_size() -> usize {
        32
    }
    pub fn optimizer() -> OptimizerName {
        OptimizerName::Sgd
    }
    pub fn lr() -> f64 {
        0.01
    }
    pub fn betas() -> [f64; 2] {
        [0.9, 0.999]
    }
    pub fn eps() -> f64 {
        1e-8
    }
    pub fn seed() -> u64 {
        1
    }
    pub fn bucket_mb() -> super::BucketMb {
        super::BucketMb::Size(25.0)
    }
    pub fn timeout_s() -> u64 {
        300
    }
    pub fn yes() -> bool {
        true
    }
    pub fn is_yes(b: &bool) -> bool {
        *b
    }
    pub fn is_no(b: &bool) -> bool {
        !*b
    }
    pub fn keep_last() -> usize {
        3
    }
    pub fn backoff_s() -> f64 {
        1.0
    }
}

impl Spec {
    /// The resolved spec as TOML (what a run folder freezes as spec.toml).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a Spec always serialises")
    }

    /// SHA-256 of the resolved spec's training-relevant content, hex. Settings that do not change
    /// what is trained (`ddp.timeout_s`, `ddp.threads`, `ddp.shared_memory`, `ddp.overlap`, `restart`, `checkpoint`, `slurm`, `spark`,
    /// `train.max_steps`, `train.log_every`) are excluded, so a resumed run may change them.
    pub fn hash(&self) -> String {
        use sha2::Digest;
        let mut s = self.clone();
        s.ddp.timeout_s = 0;
        s.ddp.threads = None;
        s.ddp.shared_memory = true;
        s.ddp.overlap = true;
        s.restart = RestartSpec::default();
        s.checkpoint = CheckpointSpec::default();
        s.slurm = SlurmSpec::default();
        s.spark = SparkSpec::default();
        s.train.max_steps = None;
        s.train.log_every = 0;
        let digest = sha2::Sha256::digest(s.to_toml().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// An error about `key` of this spec, naming its file.
    pub fn error(&self, key: &str, msg: impl Into<String>) -> Error {
        let msg = msg.into();
        Error::Spec {
            file: self.source.clone(),
            line: None,
            key: key.into(),
            msg: format!("{key}: {msg}"),
        }
    }

    /// The effective weight decay (AdamW defaults to 0.01 like PyTorch, the others to 0).
    pub fn weight_decay(&self) -> f64 {
        self.train
            .weight_decay
            .unwrap_or(match self.train.optimizer {
                OptimizerName::Adamw => 0.01,
                _ => 0.0,
            })
    }

    /// Validation of the step budget, gradient clipping and the scheduler's warm-up and floor.
    fn check_recipe(&self) -> Result<()> {
        let t = &self.train;
        let s = &t.scheduler;
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        if let Some(clip) = t.grad_clip
            && !(clip > 0.0 && clip.is_finite())
        {
            return bad(
                "train.grad_clip",
                format!(
                    "must be a positive number (the largest global L2 norm of the gradients, e.g. 1.0), got {clip}; leave it out to not clip"
                ),
            );
        }
        if t.steps == Some(0) {
            return bad(
                "train.steps",
                "must be at least 1 (the number of optimizer steps to train)".into(),
            );
        }
        if let Some(steps) = t.steps
            && t.epochs != 1
        {
            return bad(
                "train.steps",
                format!(
                    "and train.epochs are both set ({steps} steps, {} epochs): the run is counted in one of them, so keep one",
                    t.epochs
                ),
            );
        }
        if let Some(warmup) = s.warmup_steps {
            if s.warmup_epochs != 0.0 {
                return bad(
                    "train.scheduler.warmup_steps",
                    format!(
                        "and train.scheduler.warmup_epochs are both set ({warmup} steps, {} epochs): keep one of them",
                        s.warmup_epochs
                    ),
                );
            }
            if let Some(steps) = t.steps
                && warmup > steps
            {
                return bad(
                    "train.scheduler.warmup_steps",
                    format!(
                        "{warmup} is more than train.steps = {steps}: warm up over at most the run's steps"
                    ),
                );
            }
        }
        if s.kind == SchedulerKind::Cosine && s.min_lr > t.lr {
            return bad(
                "train.scheduler.min_lr",
                format!(
                    "{} is more than train.lr = {}: the cosine schedule decays from train.lr down to min_lr, so set min_lr at most train.lr",
                    s.min_lr, t.lr
                ),
            );
        }
        Ok(())
    }

    /// Whether CIFAR-style augmentation is on.
    pub fn augment(&self) -> bool {
        self.data
            .augment
            .unwrap_or(self.data.name == DataName::Cifar10)
    }

    /// Semantic validation; errors name the spec file (`self.source`) and the key.
    fn check(&self) -> Result<()> {
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        if self.train.batch_size == 0 {
            return bad(
                "train.batch_size",
                "must be at least 1 (it is per replica)".into(),
            );
        }
        if self.train.epochs == 0 {
            return bad("train.epochs", "must be at least 1".into());
        }
        if self.train.grad_accum == 0 {
            return bad(
                "train.grad_accum",
                "must be at least 1 (1 = sync every step)".into(),
            );
        }
        if !(self.train.lr > 0.0 && self.train.lr.is_finite()) {
            return bad(
                "train.lr",
                format!("must be a positive number, got {}", self.train.lr),
            );
        }
        if !(0.0..1.0).contains(&self.data.val_fraction) {
            return bad(
                "data.val_fraction",
                format!("must be in [0, 1), got {}", self.data.val_fraction),
            );
        }
        if self.ddp.replicas == 0 {
            return bad("ddp.replicas", "must be at least 1".into());
        }
        if let BucketMb::Size(mb) = self.ddp.bucket_mb
            && (mb.is_nan() || mb <= 0.0)
        {
            return bad(
                "ddp.bucket_mb",
                format!("must be positive (or \"auto\"), got {mb}"),
            );
        }
        if self.ddp.timeout_s == 0 {
            return bad("ddp.timeout_s", "must be at least 1 second".into());
        }
        if !self.ddp.compression.is_none() && !self.ddp.overlap {
            return bad(
                "ddp.compression",
                "compresses the overlapped step's all-reduce: it needs ddp.overlap = true \
                 (or set ddp.compression = \"none\")"
                    .into(),
            );
        }
        if let Some(r) = self.ddp.powersgd_rank {
            if self.ddp.compression != Compression::Powersgd {
                return bad(
                    "ddp.powersgd_rank",
                    "is the rank of PowerSGD's factors: set ddp.compression = \"powersgd\" with \
                     it, or leave it out"
                        .into(),
                );
            }
            if !(1..=256).contains(&r) {
                return bad(
                    "ddp.powersgd_rank",
                    format!("must be between 1 and 256, got {r} (4 is a good start)"),
                );
            }
        }
        self.check_precision()?;
        self.check_sync()?;
        if self.ddp.threads == Some(0) {
            return bad("ddp.threads", "must be at least 1".into());
        }
        self.check_recipe()?;
        if self.train.scheduler.kind == SchedulerKind::Step && self.train.scheduler.step_size == 0 {
            return bad(
                "train.scheduler.step_size",
                "must be at least 1 epoch".into(),
            );
        }
        if !matches!(self.data.name, DataName::Synthetic | DataName::Custom)
            && self.data.path.is_none()
        {
            return bad(
                "data.path",
                format!("is required for data.name = {:?}", self.data.name),
            );
        }
        if self.data.name == DataName::Synthetic && self.data.train_size == 0 {
            return bad("data.train_size", "must be at least 1".into());
        }
        if self.data.limit_train == Some(0) || self.data.limit_test == Some(0) {
            return bad("data.limit_train", "limits must be at least 1".into());
        }
        self.check_language_model()?;
        self.check_own_data()?;
        self.check_slurm()?;
        if !self.spark.is_empty() {
            self.check_spark()?;
        }
        self.check_elastic()?;
        if self.model.name == ModelName::Linear && self.data.task != SyntheticTask::Regression {
            return bad("model.name", "\"linear\" is a regression model: use data with data.task = \"regression\" (synthetic, or a table's numeric target)".into());
        }
        Ok(())
    }
}
