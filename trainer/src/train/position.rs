//! Where a replica's training stands when it starts: the position a checkpoint restores
//! (epochs complete, global step, steps into the next epoch), a validation still due, and this
//! rank's training-loss window; whether a checkpoint can continue with this world size; the
//! header in which rank 0 hands a checkpoint's position to every rank, and the windows every
//! rank hands rank 0 for a checkpoint.

use std::path::Path;

use crate::checkpoint::{TrainState, decode_windows, encode_windows};
use crate::report::WindowState;
use crate::scaler::LossScaler;
use crate::step::comm::{SharedCollective, with_comm};
use crate::{Error, Result};

/// Where a run stands: epochs completed, optimizer steps taken, steps taken in the epoch after
/// those (a checkpoint written inside an epoch), whether the validation of the last step is
/// still due, and this rank's training-loss window since its last train record.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Position {
    pub epoch: usize,
    pub global_step: u64,
    pub step_in_epoch: u64,
    pub val_due: bool,
    pub window: WindowState,
    /// An elastic run's position in the epoch's order of samples ([`TrainState::epoch_position`]).
    pub epoch_position: Option<usize>,
}

/// The header rank 0 sends every rank on resume: `epoch global_step optimizer_steps
/// step_in_epoch val_due windows epoch_position`, the windows in the checkpoint's form (one
/// per rank), the position `-` when there is none.
pub(super) fn header(
    state: &TrainState,
    optimizer_steps: u64,
    scaler: Option<LossScaler>,
) -> String {
    format!(
        "{} {} {} {} {} {} {} {}",
        state.epoch,
        state.global_step,
        optimizer_steps,
        state.step_in_epoch,
        state.val_due,
        encode_windows(&state.windows),
        state
            .epoch_position
            .map_or("-".to_string(), |p| p.to_string()),
        scaler.map_or("-".to_string(), |s| s.encode())
    )
}

/// Rank `rank`'s position, the optimizer's step count and fp16's loss scaler from a [`header`];
/// `None` when the header is malformed. A rank with no window in it (the checkpoint was written
/// by fewer replicas) starts an empty one.
pub(super) fn parse_header(
    header: &str,
    rank: usize,
) -> Option<(Position, u64, Option<LossScaler>)> {
    let f: Vec<&str> = header.split(' ').collect();
    let [
        epoch,
        step,
        opt_steps,
        in_epoch,
        val_due,
        windows,
        pos,
        scaler,
    ] = f[..]
    else {
        return None;
    };
    let windows = decode_windows(windows)?;
    let position = Position {
        epoch: epoch.parse().ok()?,
        global_step: step.parse().ok()?,
        step_in_epoch: in_epoch.parse().ok()?,
        val_due: val_due.parse().ok()?,
        window: windows.get(rank).copied().unwrap_or_default(),
        epoch_position: match pos {
            "-" => None,
            p => Some(p.parse().ok()?),
        },
    };
    let scaler = match scaler {
        "-" => None,
        s => Some(LossScaler::decode(s)?),
    };
    Some((position, opt_steps.parse().ok()?, scaler))
}

/// How a resume names the position it continues from: `epoch 2 done, step 30`, and for a
/// checkpoint inside an epoch `, 7 steps into epoch 3`.
pub(super) fn describe(state: &TrainState) -> String {
    let mut s = format!("epoch {} done, step {}", state.epoch, state.global_step);
    if state.step_in_epoch > 0 {
        s += &format!(
            ", {} steps into epoch {}",
            state.step_in_epoch,
            state.epoch + 1
        );
    }
    s
}

/// Refuses to continue `state`, read from the checkpoint at `path`, with `world` replicas when it
/// was written inside an epoch by another number: the order of an epoch's samples depends on it.
pub(super) fn check_world(state: &TrainState, path: &Path, world: usize) -> Result<()> {
    // An elastic run's checkpoint says where in the epoch's order it stands: any world goes on.
    if state.step_in_epoch == 0 || state.world_size == world || state.epoch_position.is_some() {
        return Ok(());
    }
    Err(Error::Env {
        var: "WORLD_SIZE".into(),
        msg: format!(
            "is {world} but the newest checkpoint, {}, was written inside an epoch by {} replicas, and the order of an epoch's samples depends on their number: resume with {} replicas, or delete that checkpoint (and its .state file) to resume from the one before it",
            path.display(),
            state.world_size,
            state.world_size
        ),
    })
}

/// Every rank's training window, by rank (each rank sends its own to all).
pub(super) fn gather_windows(
    comm: &SharedCollective,
    mine: WindowState,
) -> Result<Vec<WindowState>> {
    let text = encode_windows(&[mine]);
    let all = with_comm(comm, |c| c.all_gather_bytes(text.as_bytes()))?;
    all.iter()
        .map(|w| decode_windows(&String::from_utf8_lossy(w)))
        .collect::<Option<Vec<_>>>()
        .map(|w| w.concat())
        .ok_or_else(|| Error::Model("a rank sent a malformed training window".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mid_epoch_checkpoint_needs_its_own_world_size() {
        let at = |epoch: usize, step_in_epoch: u64| TrainState {
            epoch,
            global_step: 10,
            step_in_epoch,
            world_size: 2,
            ..TrainState::default()
        };
        let path = Path::new("c.safetensors");
        assert!(check_world(&at(1, 0), path, 3).is_ok());
        assert!(check_world(&at(0, 7), path, 2).is_ok());
        let e = check_world(&at(0, 7), path, 3).unwrap_err().to_string();
        assert!(
            e.starts_with("environment variable WORLD_SIZE: is 3 but the newest checkpoint, c.safetensors, was written inside an epoch by 2 replicas"),
            "{e}"
        );
        assert_eq!(e.matches("resume with 2 replicas").count(), 1, "{e}");
    }

    #[test]
    fn every_rank_reads_its_own_window_from_the_header() {
        let window = |loss_sum: f64| WindowState {
            loss_sum,
            batches: 3,
            samples: 96,
        };
        let state = TrainState {
            epoch: 2,
            global_step: 37,
            step_in_epoch: 7,
            val_due: true,
            windows: vec![window(0.1 + 0.2), window(2.5)],
            ..TrainState::default()
        };
        let h = header(&state, 40, None);
        let (p, opt_steps, scaler) = parse_header(&h, 1).unwrap();
        assert_eq!((opt_steps, scaler), (40, None));
        let fp16 = LossScaler::new(1024.0, 5);
        let with_scaler = header(&state, 40, Some(fp16));
        assert_eq!(parse_header(&with_scaler, 1).unwrap().2, Some(fp16));
        assert_eq!(
            p,
            Position {
                epoch: 2,
                global_step: 37,
                step_in_epoch: 7,
                val_due: true,
                window: window(2.5),
                epoch_position: None,
            }
        );
        let elastic = TrainState {
            epoch_position: Some(224),
            ..state.clone()
        };
        let (p, ..) = parse_header(&header(&elastic, 40, None), 0).unwrap();
        assert_eq!(p.epoch_position, Some(224));
        assert!(check_world(&elastic, Path::new("c"), 5).is_ok());
        assert!(check_world(&state, Path::new("c"), 5).is_err());
        assert_eq!(parse_header(&h, 0).unwrap().0.window, window(0.1 + 0.2));
        assert_eq!(
            parse_header(&h, 2).unwrap().0.window,
            WindowState::default()
        );
        assert_eq!(parse_header("1 2 3", 0), None);
        assert_eq!(parse_header("1 2 3 4 maybe  -", 0), None);
        assert_eq!(
            describe(&state),
            "epoch 2 done, step 37, 7 steps into epoch 3"
        );
        let end = TrainState {
            epoch: 1,
            global_step: 15,
            ..TrainState::default()
        };
        assert_eq!(describe(&end), "epoch 1 done, step 15");
        // An epoch checkpoint of format 1 carries no windows.
        let (p, ..) = parse_header(&header(&end, 15, None), 1).unwrap();
        assert_eq!((p.epoch, p.global_step, p.step_in_epoch), (1, 15, 0));
    }
}

/// Where a run pauses (`ddp-trainer --pause-at epoch:N` or `step:N`): after epoch N, or after
/// global step N, with a validation and a checkpoint there, no test and no final model; rank 0
/// writes [`PAUSED_FILE`], and `--resume` goes on from the checkpoint. A search's scheduler
/// (ASHA) pauses its trials at its rungs this way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseAt {
    Epoch(usize),
    Step(u64),
}

/// `OUT/paused.json`: written by rank 0 when a run paused at its `--pause-at`
/// (`{"epoch": E, "global_step": S}`); a launcher removes it before starting the replicas.
pub const PAUSED_FILE: &str = "paused.json";

/// Where rank 0 said the run in `out` paused ([`PAUSED_FILE`]): (epochs, global steps) trained.
pub fn paused_at(out: &std::path::Path) -> Option<(u64, u64)> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(PAUSED_FILE)).ok()?).ok()?;
    Some((v["epoch"].as_u64()?, v["global_step"].as_u64()?))
}

impl std::str::FromStr for PauseAt {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<PauseAt, String> {
        let bad = || format!("`{s}`: expected epoch:N or step:N with N >= 1, e.g. epoch:3");
        let (unit, n) = s.split_once(':').ok_or_else(bad)?;
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        match unit.trim() {
            "epoch" => Ok(PauseAt::Epoch(n as usize)),
            "step" => Ok(PauseAt::Step(n)),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for PauseAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PauseAt::Epoch(n) => write!(f, "epoch:{n}"),
            PauseAt::Step(n) => write!(f, "step:{n}"),
        }
    }
}

#[cfg(test)]
mod pause_tests {
    use super::PauseAt;

    #[test]
    fn pause_points_round_trip_and_bad_ones_are_refused() {
        for (s, want) in [
            ("epoch:3", PauseAt::Epoch(3)),
            ("step:200", PauseAt::Step(200)),
        ] {
            let p: PauseAt = s.parse().unwrap();
            assert_eq!(p, want);
            assert_eq!(p.to_string(), s);
        }
        for bad in ["epoch:0", "epochs:3", "3", "step:x", ""] {
            let e = bad.parse::<PauseAt>().unwrap_err();
            assert!(e.contains("epoch:N or step:N"), "{bad}: {e}");
        }
    }
}
