//! A replica's training state as [`super::Training`] keeps it, by what it is for: how far the
//! run trains ([`Limits`]), where it stands ([`Progress`]), an elastic run's state between
//! regroups ([`ElasticState`]) and what it reports ([`Reporting`]).

use std::time::{Duration, Instant};

use super::clock::StepClock;
use super::elastic::Share;
use super::position::PauseAt;
use crate::report::{Reporter, Window, WindowState};

/// How far the run trains.
pub(super) struct Limits {
    /// `train.max_steps` (`u64::MAX` without it).
    pub max_steps: u64,
    /// Epochs the run trains: `train.epochs`, or as many as `train.steps` reaches into.
    pub epochs: usize,
    /// `train.steps` (`u64::MAX` when the run is counted in epochs).
    pub budget: u64,
}

/// Where the run stands: its epoch and step, what is due, whether it stopped or paused.
pub(super) struct Progress {
    pub epoch: usize,
    pub global_step: u64,
    /// Steps of the current epoch a resumed run starts after (0 once it is under way).
    pub resume_in_epoch: u64,
    /// Steps of the current epoch completed.
    pub in_epoch: u64,
    /// The restored checkpoint's validation is still due (see [`crate::checkpoint::TrainState::val_due`]).
    pub val_due: bool,
    /// The epoch's end (validation, checkpoint) is due: its last step is done.
    pub epoch_end_due: bool,
    /// A stop was requested (and every replica stopped at the same step).
    pub stopped: bool,
    /// Where the run pauses instead of going on (`--pause-at`), and whether it did.
    pub pause: Option<PauseAt>,
    pub paused: bool,
}

/// An elastic run's state between regroups (`ddp.elastic`).
pub(super) struct ElasticState {
    /// An elastic run's minimum of replicas (`ddp.elastic.min_replicas`).
    pub min: Option<usize>,
    /// Where the current world's share of the epoch began (an elastic run's world changes).
    pub share: Share,
    /// The replicas agreed to re-form the group after the last step.
    pub regroup_due: bool,
    /// This replica joins an elastic group under way: its first act is the regroup that
    /// brings it the group's state.
    pub joining: bool,
    /// When rank 0 last looked for a replica waiting to join.
    pub looked: Instant,
    /// When the last step ended (a membership change counts the time lost from there).
    pub last_step_end: Instant,
    /// How long the last step took.
    pub last_step: Duration,
    /// The window as the last completed step left it (a step lost with a replica is not
    /// counted).
    pub settled: WindowState,
}

/// What the run reports: the reporter, the training window and its clock, the totals for the
/// throughput.
pub(super) struct Reporting {
    pub report: Reporter,
    /// This rank's training loss and samples since its last train record.
    pub window: Window,
    /// Where the window's steps spent their time.
    pub clock: StepClock,
    /// Training steps between two progress lines.
    pub log_every: u64,
    /// Seconds spent training and samples trained by this rank, for the throughput.
    pub train_time: f64,
    pub train_samples: u64,
}
