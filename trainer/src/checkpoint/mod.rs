//! Checkpoints: `DIR/checkpoints/epoch-NNNN.safetensors` (the model's state dict, loadable by
//! PyTorch) plus `epoch-NNNN.state.safetensors` (optimizer slots as flat tensors, and the training
//! position in the metadata), and the final `DIR/model.safetensors`. A checkpoint written after a
//! step inside an epoch (a stop request, `checkpoint.every_steps`) is
//! `epoch-NNNN-step-GGGGGGGG` (N epochs complete, G optimizer steps in all); a run that counts
//! optimizer steps rather than epochs (a language model's `train.steps`) names them
//! `step-GGGGGGGG`.
//!
//! A run taking local steps (`[ddp.sync]`) also writes, for every rank R, `STEM.replica-R.safetensors`:
//! the replica's own weights and optimizer state and the syncs' state ([`save_replica`]); the
//! model file holds the last synced (global) weights. Every rank writes its own before rank 0
//! writes the state and model files.
//!
//! Every file is written atomically ([`write_atomic`]: temp file + fsync + rename + fsync of the
//! folder); the state file is written first and the model file last, so a checkpoint counts as
//! complete only when both load. `--resume` takes the newest complete one and skips (with a
//! warning naming it) any that is truncated or corrupt. Which old checkpoints to delete is
//! decided by [`superseded`], a pure policy.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::fsutil::write_atomic;
use crate::models::Network;
use crate::optim::Optimizer;
use crate::report::WindowState;
use crate::scaler::LossScaler;
use crate::{Error, Result};

mod replica;

pub use replica::{load_replica, replica_path, save_replica};

/// Where training stands at a checkpoint: after a completed epoch, after a step inside an epoch
/// (`step_in_epoch` > 0), or (`epoch` 0, a run counted in steps) after `global_step` steps.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainState {
    /// Epochs completed (1-based count).
    pub epoch: usize,
    /// Optimizer steps taken in total.
    pub global_step: u64,
    /// Optimizer steps taken in the epoch after `epoch` (0 at an epoch's end and in a run
    /// counted in steps).
    pub step_in_epoch: u64,
    /// The validation due after `global_step` (`train.eval_every`) has not run yet: the stop
    /// that wrote this checkpoint came first, and a resumed run validates before its first step.
    pub val_due: bool,
    /// Every rank's training-loss window since its last train record, by rank, so that a resumed
    /// run's next record covers the same steps as an uninterrupted run's.
    pub windows: Vec<WindowState>,
    pub spec_hash: String,
    pub world_size: usize,
    /// An elastic run's position in the epoch's order of samples after `step_in_epoch` steps:
    /// the samples before it are trained, whatever worlds trained them, and any world can
    /// continue from it (`None` elsewhere: the position follows from the steps and the world).
    pub epoch_position: Option<usize>,
}

/// A checkpoint read back from disk.
pub struct Loaded {
    pub path: PathBuf,
    pub tensors: HashMap<String, Tensor>,
    pub state: TrainState,
    pub optimizer_steps: u64,
    pub slots: Vec<Vec<f32>>,
    /// fp16's loss scaler as the checkpoint left it (`None`: no loss scaling).
    pub scaler: Option<LossScaler>,
}

pub fn checkpoint_dir(out: &Path) -> PathBuf {
    out.join("checkpoints")
}

/// Where a checkpoint stands: after an epoch (`number` is the epoch), or after a step (`steps`:
/// `number` is the global step), inside an epoch (`epochs`: the epochs complete before it) or in
/// a run counted in steps. Marks order the checkpoints of a run by position: an epoch's end,
/// then the steps inside the next epoch, then that epoch's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub number: u64,
    pub steps: bool,
    /// A mid-epoch checkpoint's completed epochs; `None` for the others.
    pub epochs: Option<u64>,
}

impl Mark {
    fn of(state: &TrainState) -> Mark {
        if state.step_in_epoch > 0 {
            Mark {
                number: state.global_step,
                steps: true,
                epochs: Some(state.epoch as u64),
            }
        } else if state.epoch == 0 {
            Mark {
                number: state.global_step,
                steps: true,
                epochs: None,
            }
        } else {
            Mark {
                number: state.epoch as u64,
                steps: false,
                epochs: None,
            }
        }
    }

    /// (epochs complete, after a step, global step): the order of positions in a run.
    fn key(&self) -> (u64, bool, u64) {
        match (self.steps, self.epochs) {
            (false, _) => (self.number, false, 0),
            (true, e) => (e.unwrap_or(0), true, self.number),
        }
    }

    fn stem(self) -> String {
        match (self.steps, self.epochs) {
            (false, _) => format!("epoch-{:04}", self.number),
            (true, None) => format!("step-{:08}", self.number),
            (true, Some(e)) => format!("epoch-{e:04}-step-{:08}", self.number),
        }
    }

    fn parse(file_name: &str) -> Option<Mark> {
        let stem = file_name.strip_suffix(".safetensors")?;
        let number = |s: &str| -> Option<u64> {
            // Digits only: `epoch-0002.state` is a state file, not a checkpoint.
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        if let Some(rest) = stem.strip_prefix("epoch-") {
            return Some(match rest.split_once("-step-") {
                Some((e, g)) => Mark {
                    number: number(g)?,
                    steps: true,
                    epochs: Some(number(e)?),
                },
                None => Mark {
                    number: number(rest)?,
                    steps: false,
                    epochs: None,
                },
            });
        }
        Some(Mark {
            number: number(stem.strip_prefix("step-")?)?,
            steps: true,
            epochs: None,
        })
    }
}

impl Ord for Mark {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Mark {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.steps, self.epochs) {
            (false, _) => write!(f, "epoch {}", self.number),
            (true, None) => write!(f, "step {}", self.number),
            (true, Some(e)) => write!(f, "step {} (inside epoch {})", self.number, e + 1),
        }
    }
}

/// The model file of the checkpoint at `at` (it may not exist).
pub fn model_path(out: &Path, at: Mark) -> PathBuf {
    checkpoint_dir(out).join(format!("{}.safetensors", at.stem()))
}

fn state_path(out: &Path, at: Mark) -> PathBuf {
    checkpoint_dir(out).join(format!("{}.state.safetensors", at.stem()))
}

/// Writes the checkpoint of `state` and applies the retention policy. Returns the model path.
pub fn save(
    out: &Path,
    net: &Network,
    opt: &Optimizer,
    state: &TrainState,
    keep_last: usize,
) -> Result<PathBuf> {
    let dir = checkpoint_dir(out);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let meta: HashMap<String, String> = [
        ("format".to_string(), "ddp-train-state/2".to_string()),
        ("epoch".into(), state.epoch.to_string()),
        ("global_step".into(), state.global_step.to_string()),
        ("step_in_epoch".into(), state.step_in_epoch.to_string()),
        ("val_due".into(), state.val_due.to_string()),
        ("windows".into(), encode_windows(&state.windows)),
        ("spec_hash".into(), state.spec_hash.clone()),
        ("world_size".into(), state.world_size.to_string()),
        (
            "epoch_position".into(),
            state
                .epoch_position
                .map_or(String::new(), |p| p.to_string()),
        ),
        ("optimizer_steps".into(), opt.steps.to_string()),
        ("optimizer_slots".into(), opt.config.slot_names().join(",")),
        (
            "loss_scaler".into(),
            opt.scaler.map_or(String::new(), |s| s.encode()),
        ),
        // All randomness is counter-based on (seed, epoch, step, rank), and an epoch's order is
        // the sampler's for (seed, epoch): no RNG or data-order state to save.
        ("rng".into(), "counter-based:seed,epoch,step,rank".into()),
    ]
    .into_iter()
    .collect();
    let slots: Vec<(String, Tensor)> = opt
        .config
        .slot_names()
        .iter()
        .zip(&opt.slots)
        .map(|(name, v)| {
            Ok((
                format!("optimizer.{name}"),
                Tensor::from_slice(v, v.len(), &Device::Cpu)?,
            ))
        })
        .collect::<Result<_>>()?;
    let at = Mark::of(state);
    let state_file = state_path(out, at);
    write_safetensors(&state_file, slots, Some(meta))?;
    let model_file = model_path(out, at);
    write_safetensors(&model_file, net.state(), None)?;
    let marks = list_marks(out)?;
    for old in superseded(&marks, keep_last) {
        let replicas = replica_files(out, old)?;
        for p in [model_path(out, old), state_path(out, old)]
            .into_iter()
            .chain(replicas)
        {
            if let Err(e) = std::fs::remove_file(&p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(Error::io(&p, e));
            }
        }
    }
    Ok(model_file)
}

/// Every rank's own files of the checkpoint at `at`.
fn replica_files(out: &Path, at: Mark) -> Result<Vec<PathBuf>> {
    let dir = checkpoint_dir(out);
    let prefix = format!("{}.replica-", at.stem());
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
    Ok(entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect())
}

/// Writes the final model to `DIR/model.safetensors`.
pub fn save_final(out: &Path, net: &Network) -> Result<PathBuf> {
    let p = out.join("model.safetensors");
    write_safetensors(&p, net.state(), None)?;
    Ok(p)
}

/// Retention policy: given the positions that have checkpoints, which to delete to keep the
/// newest `keep_last` (0 keeps all).
pub fn retention<T: Ord + Copy>(epochs: &[T], keep_last: usize) -> Vec<T> {
    if keep_last == 0 || epochs.len() <= keep_last {
        return vec![];
    }
    let mut sorted = epochs.to_vec();
    sorted.sort_unstable();
    sorted[..sorted.len() - keep_last].to_vec()
}

/// Which checkpoints to delete under `checkpoint.keep_last` (0 keeps all): of the epochs'
/// checkpoints the newest `keep_last` stay; of the checkpoints after a step (mid-epoch, or a run
/// counted in steps) the newest `keep_last` of those newer than the newest epoch checkpoint stay,
/// and the older ones go (a resume would take that epoch checkpoint over them).
pub fn superseded(marks: &[Mark], keep_last: usize) -> Vec<Mark> {
    if keep_last == 0 {
        return vec![];
    }
    let epochs: Vec<Mark> = marks.iter().copied().filter(|m| !m.steps).collect();
    let newest_epoch = epochs.iter().max().copied();
    let (current, old): (Vec<Mark>, Vec<Mark>) = marks
        .iter()
        .copied()
        .filter(|m| m.steps)
        .partition(|m| newest_epoch.is_none_or(|e| *m > e));
    let mut out = retention(&epochs, keep_last);
    out.extend(old);
    out.extend(retention(&current, keep_last));
    out.sort_unstable();
    out
}

/// `loss_sum:batches:samples` per rank, `;` between ranks (the loss sum prints back exactly).
pub fn encode_windows(windows: &[WindowState]) -> String {
    windows
        .iter()
        .map(|w| format!("{}:{}:{}", w.loss_sum, w.batches, w.samples))
        .collect::<Vec<_>>()
        .join(";")
}

/// The windows of [`encode_windows`]; `None` when `text` is not in that form.
pub fn decode_windows(text: &str) -> Option<Vec<WindowState>> {
    if text.is_empty() {
        return Some(vec![]);
    }
    text.split(';')
        .map(|w| {
            let mut f = w.split(':');
            let window = WindowState {
                loss_sum: f.next()?.parse().ok()?,
                batches: f.next()?.parse().ok()?,
                samples: f.next()?.parse().ok()?,
            };
            f.next().is_none().then_some(window)
        })
        .collect()
}

/// Epoch numbers that have a model checkpoint file (complete or not), ascending.
pub fn list_epochs(out: &Path) -> Result<Vec<usize>> {
    Ok(list_marks(out)?
        .into_iter()
        .filter(|m| !m.steps)
        .map(|m| m.number as usize)
        .collect())
}

/// The positions that have a model checkpoint file (complete or not), ascending.
pub fn list_marks(out: &Path) -> Result<Vec<Mark>> {
    let dir = checkpoint_dir(out);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut marks: Vec<Mark> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Mark::parse(&e.file_name().to_string_lossy()))
        .collect();
    marks.sort_unstable();
    Ok(marks)
}

/// The newest checkpoint whose model and state both load; broken ones are reported through `warn`
/// (named) and skipped.
pub fn latest_complete(out: &Path, mut warn: impl FnMut(String)) -> Result<Option<Loaded>> {
    for at in list_marks(out)?.into_iter().rev() {
        match load(out, at) {
            Ok(l) => return Ok(Some(l)),
            Err(e) => warn(format!("warning: skipping checkpoint {at}: {e}")),
        }
    }
    Ok(None)
}

fn load(out: &Path, at: Mark) -> Result<Loaded> {
    let model_file = model_path(out, at);
    let state_file = state_path(out, at);
    let tensors = read_safetensors(&model_file)?.0;
    let (slot_tensors, meta) = read_safetensors(&state_file)?;
    let get = |k: &str| -> Result<String> {
        meta.get(k).cloned().ok_or_else(|| Error::Checkpoint {
            path: state_file.clone(),
            msg: format!("metadata lacks `{k}`"),
        })
    };
    let num = |k: &str| -> Result<u64> {
        get(k)?.parse().map_err(|_| Error::Checkpoint {
            path: state_file.clone(),
            msg: format!("metadata `{k}` is not a number"),
        })
    };
    // Checkpoints of format 1 have no position inside an epoch, pending validation or windows.
    let optional = |k: &str| meta.get(k).map(String::as_str).unwrap_or_default();
    let state = TrainState {
        epoch: num("epoch")? as usize,
        global_step: num("global_step")?,
        step_in_epoch: match optional("step_in_epoch") {
            "" => 0,
            _ => num("step_in_epoch")?,
        },
        val_due: optional("val_due") == "true",
        windows: decode_windows(optional("windows")).ok_or_else(|| Error::Checkpoint {
            path: state_file.clone(),
            msg: "metadata `windows` is not `loss_sum:batches:samples` per rank".into(),
        })?,
        spec_hash: get("spec_hash")?,
        world_size: num("world_size")? as usize,
        epoch_position: match optional("epoch_position") {
            "" => None,
            _ => Some(num("epoch_position")? as usize),
        },
    };
    let names = get("optimizer_slots")?;
    let slots = names
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|n| {
            let t =
                slot_tensors
                    .get(&format!("optimizer.{n}"))
                    .ok_or_else(|| Error::Checkpoint {
                        path: state_file.clone(),
                        msg: format!("missing optimizer slot `{n}`"),
                    })?;
            Ok(t.to_vec1::<f32>()?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Loaded {
        path: model_file,
        tensors,
        state,
        optimizer_steps: num("optimizer_steps")?,
        slots,
        scaler: match optional("loss_scaler") {
            "" => None,
            text => Some(LossScaler::decode(text).ok_or_else(|| Error::Checkpoint {
                path: state_file.clone(),
                msg: format!(
                    "metadata `loss_scaler` is not `scale:finite_run:skipped:growth_every`: {text:?}"
                ),
            })?),
        },
    })
}

type Metadata = HashMap<String, String>;

/// The tensors of a model file (a checkpoint's or `model.safetensors`); a file that is not
/// complete safetensors is an error naming it.
pub fn read_model(path: &Path) -> Result<HashMap<String, Tensor>> {
    Ok(read_safetensors(path)?.0)
}

fn read_safetensors(path: &Path) -> Result<(HashMap<String, Tensor>, Metadata)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let corrupt = |msg: String| Error::Checkpoint {
        path: path.to_path_buf(),
        msg,
    };
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| corrupt(format!("not a complete safetensors file ({e})")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .map_err(|e| corrupt(format!("unreadable tensors ({e})")))?;
    Ok((tensors, meta))
}

fn write_safetensors(
    path: &Path,
    tensors: Vec<(String, Tensor)>,
    meta: Option<Metadata>,
) -> Result<()> {
    let host: Vec<(String, Tensor)> = tensors
        .into_iter()
        .map(|(k, t)| Ok((k, t.to_device(&Device::Cpu)?.contiguous()?)))
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(host, meta).map_err(|e| Error::Checkpoint {
        path: path.to_path_buf(),
        msg: format!("cannot serialise: {e}"),
    })?;
    write_atomic(path, &bytes).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::BnMode;
    use crate::optim::OptimizerConfig;
    use crate::spec::ModelName;

    #[test]
    fn retention_keeps_newest() {
        assert_eq!(retention(&[1, 2, 3, 4], 2), vec![1, 2]);
        assert_eq!(retention(&[3, 1, 2], 3), Vec::<usize>::new());
        assert_eq!(retention(&[1, 2], 0), Vec::<usize>::new());
    }

    fn setup() -> (tempfile::TempDir, Network, Optimizer) {
        let dir = tempfile::tempdir().unwrap();
        let net = Network::new(
            ModelName::ConvnetBn,
            [1, 28, 28],
            10,
            &Device::Cpu,
            BnMode::Local,
            1,
        )
        .unwrap();
        let mut opt = Optimizer::new(
            OptimizerConfig::Adam {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            4,
        );
        opt.steps = 7;
        opt.slots[0][2] = 1.5;
        (dir, net, opt)
    }

    fn state(epoch: usize) -> TrainState {
        TrainState {
            epoch,
            global_step: 10 * epoch as u64,
            spec_hash: "abc".into(),
            world_size: 2,
            ..TrainState::default()
        }
    }

    #[test]
    fn step_checkpoints_are_named_and_ordered_by_step() {
        let m = |name: &str| Mark::parse(name);
        assert_eq!(
            m("step-00000500.safetensors").unwrap().stem(),
            "step-00000500"
        );
        assert_eq!(m("epoch-0003.safetensors").unwrap().stem(), "epoch-0003");
        assert!(m("step-00000500.state.safetensors").is_none());
        assert!(m("step-00000050.safetensors") < m("step-00000500.safetensors"));
        let state = TrainState {
            global_step: 750,
            world_size: 1,
            ..TrainState::default()
        };
        assert_eq!(Mark::of(&state).to_string(), "step 750");
    }

    #[test]
    fn mid_epoch_checkpoints_sort_between_the_epochs_they_fall_in() {
        let m = |name: &str| Mark::parse(name).unwrap();
        let mid = m("epoch-0002-step-00000037.safetensors");
        assert_eq!(
            mid,
            Mark {
                number: 37,
                steps: true,
                epochs: Some(2)
            }
        );
        assert_eq!(mid.stem(), "epoch-0002-step-00000037");
        assert_eq!(mid.to_string(), "step 37 (inside epoch 3)");
        assert!(Mark::parse("epoch-0002-step-00000037.state.safetensors").is_none());
        assert!(Mark::parse("epoch-0002-step-.safetensors").is_none());
        let mut marks = [
            m("epoch-0003.safetensors"),
            mid,
            m("epoch-0002.safetensors"),
            m("epoch-0002-step-00000032.safetensors"),
            m("epoch-0000-step-00000004.safetensors"),
            m("epoch-0001.safetensors"),
        ];
        marks.sort();
        let stems: Vec<String> = marks.iter().map(|m| m.stem()).collect();
        assert_eq!(
            stems,
            [
                "epoch-0000-step-00000004",
                "epoch-0001",
                "epoch-0002",
                "epoch-0002-step-00000032",
                "epoch-0002-step-00000037",
                "epoch-0003",
            ]
        );
        let state = TrainState {
            epoch: 2,
            global_step: 37,
            step_in_epoch: 7,
            ..TrainState::default()
        };
        assert_eq!(Mark::of(&state), mid);
    }

    #[test]
    fn retention_keeps_the_newest_epochs_and_the_steps_after_them() {
        let m = |name: &str| Mark::parse(&format!("{name}.safetensors")).unwrap();
        let names = |marks: Vec<Mark>| marks.iter().map(|m| m.stem()).collect::<Vec<_>>();
        let marks = [
            m("epoch-0000-step-00000005"),
            m("epoch-0001"),
            m("epoch-0001-step-00000020"),
            m("epoch-0002"),
            m("epoch-0002-step-00000035"),
            m("epoch-0002-step-00000040"),
            m("epoch-0002-step-00000045"),
        ];
        assert_eq!(
            names(superseded(&marks, 2)),
            [
                "epoch-0000-step-00000005",
                "epoch-0001-step-00000020",
                "epoch-0002-step-00000035",
            ]
        );
        assert_eq!(
            names(superseded(&marks, 1)),
            [
                "epoch-0000-step-00000005",
                "epoch-0001",
                "epoch-0001-step-00000020",
                "epoch-0002-step-00000035",
                "epoch-0002-step-00000040",
            ]
        );
        assert!(superseded(&marks, 0).is_empty());
        // A run counted in steps keeps its newest steps.
        let steps = [m("step-00000010"), m("step-00000020"), m("step-00000030")];
        assert_eq!(names(superseded(&steps, 2)), ["step-00000010"]);
    }

    #[test]
    fn windows_round_trip_exactly() {
        let windows = vec![
            WindowState {
                loss_sum: 0.1 + 0.2,
                batches: 3,
                samples: 96,
            },
            WindowState::default(),
        ];
        let text = encode_windows(&windows);
        assert_eq!(decode_windows(&text), Some(windows));
        assert_eq!(decode_windows(""), Some(vec![]));
        assert_eq!(decode_windows("1:2"), None);
        assert_eq!(decode_windows("1:2:3:4"), None);
    }

    #[test]
    fn the_position_inside_an_epoch_round_trips() {
        let (dir, net, opt) = setup();
        let state = TrainState {
            epoch: 2,
            global_step: 37,
            step_in_epoch: 7,
            val_due: true,
            windows: vec![
                WindowState {
                    loss_sum: 1.0 / 3.0,
                    batches: 2,
                    samples: 64,
                };
                2
            ],
            spec_hash: "abc".into(),
            world_size: 2,
            epoch_position: Some(224),
        };
        let p = save(dir.path(), &net, &opt, &state, 3).unwrap();
        assert!(p.ends_with("checkpoints/epoch-0002-step-00000037.safetensors"));
        let l = latest_complete(dir.path(), |w| panic!("{w}"))
            .unwrap()
            .unwrap();
        assert_eq!(l.state, state);
    }

    #[test]
    fn save_load_round_trip_and_retention() {
        let (dir, net, opt) = setup();
        for e in 1..=4 {
            save(dir.path(), &net, &opt, &state(e), 2).unwrap();
        }
        assert_eq!(list_epochs(dir.path()).unwrap(), vec![3, 4]);
        let l = latest_complete(dir.path(), |w| panic!("{w}"))
            .unwrap()
            .unwrap();
        assert_eq!(l.state, state(4));
        assert_eq!(l.optimizer_steps, 7);
        assert_eq!(l.slots[0][2], 1.5);
        assert!(l.tensors.contains_key("layer1.1.num_batches_tracked"));
        net.load_state(&l.tensors, "x").unwrap();
        // No temp files left behind.
        let names: Vec<String> = std::fs::read_dir(checkpoint_dir(dir.path()))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    }

    #[test]
    fn truncated_newest_is_skipped_with_a_warning() {
        let (dir, net, opt) = setup();
        save(dir.path(), &net, &opt, &state(1), 3).unwrap();
        let p = save(dir.path(), &net, &opt, &state(2), 3).unwrap();
        let len = std::fs::metadata(&p).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        let mut warnings = vec![];
        let l = latest_complete(dir.path(), |w| warnings.push(w))
            .unwrap()
            .unwrap();
        assert_eq!(l.state.epoch, 1);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("epoch 2") && warnings[0].contains("epoch-0002.safetensors"),
            "{warnings:?}"
        );
    }
}
