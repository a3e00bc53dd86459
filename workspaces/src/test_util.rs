//! Builders of the workspace's types for tests, here and in the front ends' tests: compiled for
//! this crate's own tests and, elsewhere, with the `test-util` feature
//! (`ddp-workspaces = { workspace = true, features = ["test-util"] }` in `[dev-dependencies]`).
//! The feature turns on the trainer's builders too, so front ends reach
//! `MetricRecord::sample()` through [`crate::metrics::MetricRecord`].
//!
//! [`RunRecord::sample`] is a complete record with plain values; chain the setters (one per
//! field, named after it; text fields take a `&str`) and place it with [`RunRecord::in_dir`] or
//! [`RunRecord::in_workspace`]. [`metric`] is the point of a curve (kind, epoch, step, loss,
//! accuracy) most tests of plots, summaries and views draw from. [`lm_metrics`] are the records
//! of a language model's run and [`lm_run_in`] that run in a folder (spec and metrics written),
//! the one fixture every front end's tests of language models use. [`Telemetry::sample`] and
//! [`ProcessSample::sample`] are readings for the devices views, built the same way, and
//! [`SlurmJob::sample`] the job of a run on Slurm.
//!
//! Run folders on disk: [`completed_run`] (a completed run of a spec, nothing trained) and
//! [`gpt_run`] (a completed tiny GPT on text with its tokenizer and final weights, untrained:
//! what text generation reads).
//!
//! ```
//! use ddp_workspaces::metrics::{MetricKind, MetricRecord};
//! use ddp_workspaces::test_util::metric;
//! use ddp_workspaces::{RunRecord, RunStatus};
//!
//! let run = RunRecord::sample()
//!     .id("r1")
//!     .status(RunStatus::Completed)
//!     .ended(Some(12.5))
//!     .in_workspace("/ws");
//! assert_eq!(run.dir, std::path::Path::new("/ws/experiments/mnist/runs/r1"));
//! assert_eq!(run.record.experiment, "mnist");
//! let val = MetricRecord::sample().at(MetricKind::Val, 1, 10).accuracy(Some(0.9));
//! assert_eq!(val.world_size, 2);
//! assert_eq!(metric(MetricKind::Val, 1, 10, 1.0, Some(0.9)), val);
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use ddp_trainer::test_util::{max_abs_diff, tensor_diff, worst_tensor, write_gpt};

use ddp_trainer::data::text::{TOKENIZER_FILE, Tokenizer};
use ddp_trainer::models::gpt::GptConfig;
/// The fixtures every crate's tests share (specs, sample data, waits): the trainer's.
pub use ddp_trainer::test_util::fixtures;

use crate::Workspace;
use crate::engine::devices::telemetry::{
    CpuSample, GpuSample, MemorySample, Owner, ProcessSample, Telemetry,
};
use crate::engine::slurm::SlurmJob;
use crate::metrics::{MetricKind, MetricRecord};
use crate::runs::run::{ProcessId, Run, RunRecord, RunStatus};
use crate::spec::Spec;

/// The spec of [`gpt_run`]: a GPT of 1 layer, 2 heads, 16 channels and a context of 8
/// characters on a text (`input.txt`, not read: its vocabulary is [`GPT_TEXT`]'s).
pub const GPT_SPEC: &str = "name = \"tiny-gpt\"\n[model]\nname = \"gpt\"\nlayers = 1\n\
    heads = 2\nembd = 16\nblock = 8\n[data]\nname = \"text\"\npath = \"input.txt\"\n\
    [train]\nsteps = 6\nbatch_size = 4\n[ddp]\nreplicas = 1\n";
/// The text whose sorted distinct characters are [`gpt_run`]'s vocabulary (27 characters:
/// newline, space, `,` `.` `:` `B` `C` `F` and lower-case letters).
pub const GPT_TEXT: &str = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
/// The spec of a run that is not a language model (an MLP on synthetic data).
pub const MLP_SPEC: &str =
    "name = \"mlp\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n[train]\nepochs = 1\n";

/// A completed run of the spec `spec_text` in the workspace at `root` (created if need be):
/// its folder holds the frozen spec and `run.json`, nothing trained.
pub fn completed_run(root: &Path, spec_text: &str) -> Run {
    let spec = Spec::parse_at(spec_text, &root.join("spec.toml"), &[]).expect("a valid spec");
    let ws = Workspace::open_or_create(root).expect("a workspace folder");
    let mut run = ws.create_run(&spec, vec![], None, None).expect("a run");
    run.update(|r| {
        r.status = RunStatus::Completed;
        r.started = Some(r.created);
        r.ended = Some(r.created + 1.0);
    })
    .expect("run.json written");
    run
}

/// A completed run of a tiny GPT on text ([`GPT_SPEC`]) in the workspace at `root`: its
/// `tokenizer.json` (the characters of [`GPT_TEXT`]) and its final `model.safetensors`
/// (weights initialised from seed 1, untrained), as training leaves them.
pub fn gpt_run(root: &Path) -> Run {
    let run = completed_run(root, GPT_SPEC);
    let tokenizer = Tokenizer::char_from_text(GPT_TEXT, "input.txt");
    tokenizer
        .save(&run.dir.join(TOKENIZER_FILE))
        .expect("tokenizer.json written");
    let spec = Spec::load(&run.spec_path(), &[]).expect("the frozen spec");
    write_gpt(
        &run.dir,
        &GptConfig::from_spec(&spec, tokenizer.vocab_size()),
        1,
        None,
    );
    run
}

/// The record of `kind` at `epoch` and `step` with `loss` and `accuracy`, the rest as
/// `MetricRecord::sample()` (rank 0 of 2, time 0; chain its setters to change more).
pub fn metric(
    kind: MetricKind,
    epoch: usize,
    step: u64,
    loss: f64,
    accuracy: Option<f64>,
) -> MetricRecord {
    MetricRecord::sample()
        .at(kind, epoch, step)
        .loss(loss)
        .accuracy(accuracy)
}

/// The time of a language model's run's first record in [`lm_metrics`] (Unix seconds).
pub const LM_T0: f64 = 1_795_000_000.0;

/// Rank 0's records of a language model trained for 2000 steps (world 2, `block = 64`, 12
/// windows per replica and step, the `char` tokenizer), stopped at step 1200: a train record every
/// 400 steps (4800 windows, 307,200 tokens each) and a validation over 1714 windows right after:
///
/// | step | train loss | lr | samples/s | tokens/s | val loss |
/// | --- | --- | --- | --- | --- | --- |
/// | 400 | 2.1 | 0.001 | 120 | 7680 | 2.0 |
/// | 800 | 1.6 | 0.0008 | 125 | 8000 | 1.5 |
/// | 1200 | 1.4 | 0.0005 | 130 | 8320 | 1.45 |
///
/// (samples/s and tokens/s are rank 0's: twice that for the run). Each validation carries its
/// perplexity `exp(loss)` and bits per character `loss / ln 2`, as the trainer writes them; the
/// train record at step `s` is at `LM_T0 + s / 10` seconds, its validation 2 s later.
pub fn lm_metrics() -> Vec<MetricRecord> {
    let mut records = Vec::new();
    for (step, train, lr, sps, val) in [
        (400, 2.1, 0.001, 120.0, 2.0),
        (800, 1.6, 0.0008, 125.0, 1.5),
        (1200, 1.4, 0.0005, 130.0, 1.45f64),
    ] {
        let time = LM_T0 + step as f64 / 10.0;
        let at = |kind| MetricRecord::sample().at(kind, 1, step).lr(lr);
        records.push(
            at(MetricKind::Train)
                .time(time)
                .loss(train)
                .samples_per_sec(sps)
                .samples(Some(4800))
                .tokens_per_sec(Some(sps * 64.0))
                .tokens(Some(4800 * 64)),
        );
        records.push(
            at(MetricKind::Val)
                .time(time + 2.0)
                .loss(val)
                .perplexity(Some(val.exp()))
                .bits_per_char(Some(val / std::f64::consts::LN_2))
                .samples_per_sec(857.0)
                .samples(Some(1714)),
        );
    }
    records
}

/// The frozen spec of the run of [`lm_metrics`]: the baby GPT on character-level Shakespeare,
/// `train.steps = 2000`.
pub const LM_SPEC: &str = "name = \"gpt-shakespeare\"\n\n[model]\nname = \"gpt\"\nlayers = 4\nheads = 4\nembd = 128\nblock = 64\n\n[data]\nname = \"text\"\npath = \"data/shakespeare/input.txt\"\ntokenizer = \"char\"\n\n[train]\nsteps = 2000\neval_every = 400\nbatch_size = 12\noptimizer = \"adamw\"\nlr = 0.001\n";

/// A language model's run in the folder `dir`, stopped at step 1200 of 2000: `spec.toml`
/// ([`LM_SPEC`]) and `metrics/rank-0.jsonl` ([`lm_metrics`]) are written there; the record is
/// [`RunRecord::sample`]'s of experiment `gpt-shakespeare`, stopped, started at [`LM_T0`] and
/// ended 125 s later.
pub fn lm_run_in(dir: impl Into<PathBuf>) -> Run {
    let run = RunRecord::sample()
        .experiment("gpt-shakespeare")
        .status(RunStatus::Stopped)
        .started(Some(LM_T0))
        .ended(Some(LM_T0 + 125.0))
        .in_dir(dir);
    let metrics = crate::metrics::metrics_path(&run.dir, 0);
    std::fs::create_dir_all(metrics.parent().expect("a metrics folder"))
        .expect("the run folder can be created");
    std::fs::write(run.spec_path(), LM_SPEC).expect("spec.toml can be written");
    let lines: String = lm_metrics()
        .iter()
        .map(|m| serde_json::to_string(m).expect("a record serializes") + "\n")
        .collect();
    std::fs::write(&metrics, lines).expect("the metrics can be written");
    run
}

impl RunRecord {
    /// Run `20261121-101500-abc123` of experiment `mnist`, running: spec hash `h`, command
    /// `ddp run`, host `h`, 2 replicas on `cpu`, created at 1 (Unix seconds); no name, sweep,
    /// supervisor, replica pids, start, end, exit codes, restarts, trainer or error.
    pub fn sample() -> RunRecord {
        RunRecord {
            id: "20261121-101500-abc123".into(),
            experiment: "mnist".into(),
            name: None,
            sweep: None,
            status: RunStatus::Running,
            spec_hash: "h".into(),
            command: vec!["ddp".into(), "run".into()],
            host: "h".into(),
            replicas: 2,
            devices: "cpu".into(),
            supervisor: None,
            replica_pids: BTreeMap::new(),
            created: 1.0,
            started: None,
            ended: None,
            exit_codes: BTreeMap::new(),
            restarts: 0,
            trainer: None,
            error: None,
            data: None,
            slurm: None,
            spark: None,
            pause_at: None,
        }
    }

    /// The run of this record in the folder `dir` (nothing is written).
    pub fn in_dir(self, dir: impl Into<PathBuf>) -> Run {
        Run {
            dir: dir.into(),
            record: self,
        }
    }

    /// The run of this record in its folder of the workspace at `root`,
    /// `root/experiments/<experiment>/runs/<id>` (nothing is written).
    pub fn in_workspace(self, root: impl AsRef<Path>) -> Run {
        let ws = Workspace {
            root: root.as_ref().to_path_buf(),
        };
        let dir = ws
            .experiments_dir()
            .join(&self.experiment)
            .join("runs")
            .join(&self.id);
        self.in_dir(dir)
    }

    ddp_trainer::test_setters! {
        name: Option<String>, sweep: Option<String>, status: RunStatus, command: Vec<String>,
        replicas: usize, supervisor: Option<ProcessId>, replica_pids: BTreeMap<usize, u32>,
        created: f64, started: Option<f64>, ended: Option<f64>,
        exit_codes: BTreeMap<usize, i32>, restarts: u32, trainer: Option<PathBuf>,
        error: Option<String>;
        into id: String, experiment: String, spec_hash: String, host: String, devices: String,
    }
}

impl SlurmJob {
    /// Job `42`, `RUNNING` on the 2 nodes `n[1-2]`, no reason, never requeued; vary it with
    /// `SlurmJob { state: ..., ..SlurmJob::sample() }`.
    pub fn sample() -> SlurmJob {
        SlurmJob {
            job_id: "42".into(),
            state: "RUNNING".into(),
            reason: None,
            nodes: 2,
            node_list: Some("n[1-2]".into()),
            requeues: 0,
        }
    }
}

impl Telemetry {
    /// A reading at time 0, 1 s after the previous one, of a machine without GPUs (no note):
    /// 4 cores at 10, 50, 90 and 30% (45% in all), 16 GiB of memory of which 12 GiB available,
    /// one process ([`ProcessSample::sample`]), no other note.
    pub fn sample() -> Telemetry {
        Telemetry {
            time: 0.0,
            interval_s: 1.0,
            gpus: vec![],
            gpu_note: None,
            cpu: CpuSample {
                per_core_pct: vec![10.0, 50.0, 90.0, 30.0],
                total_pct: 45.0,
            },
            memory: MemorySample {
                total_bytes: 16 << 30,
                available_bytes: 12 << 30,
            },
            processes: vec![ProcessSample::sample()],
            notes: vec![],
        }
    }

    ddp_trainer::test_setters! {
        time: f64, interval_s: f64, gpus: Vec<GpuSample>, gpu_note: Option<String>,
        cpu: CpuSample, memory: MemorySample, processes: Vec<ProcessSample>, notes: Vec<String>,
    }
}

impl ProcessSample {
    /// Process 4242, rank 0 of run `r1` of `mnist`, using 97% of a core and 512 MiB:
    /// `ddp-trainer --rank 0`.
    pub fn sample() -> ProcessSample {
        ProcessSample {
            pid: 4242,
            owner: Owner {
                run_id: "r1".into(),
                experiment: "mnist".into(),
                rank: Some(0),
            },
            cpu_pct: Some(97.0),
            rss_bytes: Some(512 << 20),
            command: "ddp-trainer --rank 0".into(),
        }
    }

    ddp_trainer::test_setters! {
        pid: u32, owner: Owner, cpu_pct: Option<f64>, rss_bytes: Option<u64>;
        into command: String,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_change_one_field_each() {
        let r = RunRecord::sample()
            .id("r2")
            .experiment("cifar")
            .name(Some("wide".into()))
            .sweep(Some("s1".into()))
            .status(RunStatus::Failed)
            .spec_hash("h2")
            .command(vec!["ddp".into()])
            .host("box")
            .replicas(4)
            .devices("cuda:0,1")
            .supervisor(Some(ProcessId {
                pid: 7,
                start_ticks: 8,
            }))
            .replica_pids(BTreeMap::from([(0, 9)]))
            .created(2.0)
            .started(Some(3.0))
            .ended(Some(4.0))
            .exit_codes(BTreeMap::from([(0, 1)]))
            .restarts(5)
            .trainer(Some("t".into()))
            .error(Some("e".into()));
        assert_eq!(
            r,
            RunRecord {
                id: "r2".into(),
                experiment: "cifar".into(),
                name: Some("wide".into()),
                sweep: Some("s1".into()),
                status: RunStatus::Failed,
                spec_hash: "h2".into(),
                command: vec!["ddp".into()],
                host: "box".into(),
                replicas: 4,
                devices: "cuda:0,1".into(),
                supervisor: Some(ProcessId {
                    pid: 7,
                    start_ticks: 8,
                }),
                replica_pids: BTreeMap::from([(0, 9)]),
                created: 2.0,
                started: Some(3.0),
                ended: Some(4.0),
                exit_codes: BTreeMap::from([(0, 1)]),
                restarts: 5,
                trainer: Some("t".into()),
                error: Some("e".into()),
                data: None,
                slurm: None,
                spark: None,
                pause_at: None,
            }
        );
    }

    #[test]
    fn runs_are_placed_in_their_folder() {
        let run = RunRecord::sample().in_dir("/tmp/r");
        assert_eq!(
            (run.dir, run.record),
            ("/tmp/r".into(), RunRecord::sample())
        );
        let run = RunRecord::sample().experiment("cifar").in_workspace("/ws");
        assert_eq!(
            run.dir,
            Path::new("/ws/experiments/cifar/runs/20261121-101500-abc123")
        );
    }
}
