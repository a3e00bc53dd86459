//! Run folders and the workspace that holds them: the on-disk contract every front end,
//! supervisor and replica shares.
//!
//! Layout:
//! - `workspace`: the workspace root, run creation, listing and addressing (`latest`,
//!   prefixes).
//! - `run`: one run folder: `run.json` (atomic; what a Slurm job or a Spark application records
//!   in it), `events.jsonl`, stale-supervisor detection, the workspace a run folder belongs to.
//! - `logs`: a run's replica logs as front ends print them (rank prefixes, `--tail`), an
//!   attempt's error lines.
//! - `plan`: how long a run trains (`train.epochs`, or `train.steps` for a run counted in
//!   steps), from its frozen spec.

pub mod logs;
pub mod plan;
pub mod run;
pub mod workspace;
