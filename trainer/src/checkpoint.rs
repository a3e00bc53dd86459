//! Checkpoints: `DIR/checkpoints/epoch-NNNN.safetensors` (the model's state dict, loadable by
//! PyTorch) plus `epoch-NNNN.state.safetensors` (optimizer slots as flat tensors, and the training
//! position in the metadata), and the final `DIR/model.safetensors`. A run that counts optimizer
//! steps rather than epochs (a language model's `train.steps`) names them `step-NNNNNNNN`.
//!
//! Every file is written atomically ([`write_atomic`]: temp file + fsync + rename + fsync of the
//! folder); the state
//! file is written first and the model file last, so an epoch counts as complete only when both
//! load. `--resume` takes the newest complete one and skips (with a warning naming it) any that is
//! truncated or corrupt. Which old checkpoints to delete is decided by [`retention`], a pure policy.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::fsutil::write_atomic;
use crate::models::Network;
use crate::optim::Optimizer;
use crate::{Error, Result};

/// Where training stands after a completed epoch (or, `epoch` 0, after `global_step` steps).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainState {
    /// Epochs completed (1-based count).
    pub epoch: usize,
    /// Optimizer steps taken in total.
    pub global_step: u64,
    pub spec_hash: String,
    pub world_size: usize,
}

/// A checkpoint read back from disk.
pub struct Loaded {
    pub path: PathBuf,
    pub tensors: HashMap<String, Tensor>,
    pub state: TrainState,
    pub optimizer_steps: u64,
    pub slots: Vec<Vec<f32>>,
}

pub fn checkpoint_dir(out: &Path) -> PathBuf {
    out.join("checkpoints")
}

/// Where a checkpoint stands: after an epoch, or (epoch 0, a run counted in steps) after a step.
/// Its number orders the checkpoints of a run (a run has one kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    pub number: u64,
    pub steps: bool,
}

impl Mark {
    fn of(state: &TrainState) -> Mark {
        if state.epoch == 0 {
            Mark {
                number: state.global_step,
                steps: true,
            }
        } else {
            Mark {
                number: state.epoch as u64,
                steps: false,
            }
        }
    }

    fn stem(self) -> String {
        if self.steps {
            format!("step-{:08}", self.number)
        } else {
            format!("epoch-{:04}", self.number)
        }
    }

    fn parse(file_name: &str) -> Option<Mark> {
        let stem = file_name.strip_suffix(".safetensors")?;
        if let Some(n) = stem.strip_prefix("epoch-") {
            return Some(Mark {
                number: n.parse().ok()?,
                steps: false,
            });
        }
        let n = stem.strip_prefix("step-")?;
        Some(Mark {
            number: n.parse().ok()?,
            steps: true,
        })
    }
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = if self.steps { "step" } else { "epoch" };
        write!(f, "{unit} {}", self.number)
    }
}

/// The model file of the checkpoint at `at` (it may not exist).
pub fn model_path(out: &Path, at: Mark) -> PathBuf {
    checkpoint_dir(out).join(format!("{}.safetensors", at.stem()))
}

fn state_path(out: &Path, at: Mark) -> PathBuf {
    checkpoint_dir(out).join(format!("{}.state.safetensors", at.stem()))
}

/// Writes the checkpoint of `state.epoch` and applies the retention policy. Returns the model path.
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
        ("format".to_string(), "ddp-train-state/1".to_string()),
        ("epoch".into(), state.epoch.to_string()),
        ("global_step".into(), state.global_step.to_string()),
        ("spec_hash".into(), state.spec_hash.clone()),
        ("world_size".into(), state.world_size.to_string()),
        ("optimizer_steps".into(), opt.steps.to_string()),
        ("optimizer_slots".into(), opt.config.slot_names().join(",")),
        // All randomness is counter-based on (seed, epoch, step, rank): no RNG state to save.
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
    for old in retention(&marks, keep_last) {
        for p in [model_path(out, old), state_path(out, old)] {
            if let Err(e) = std::fs::remove_file(&p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(Error::io(&p, e));
            }
        }
    }
    Ok(model_file)
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
    let state = TrainState {
        epoch: num("epoch")? as usize,
        global_step: num("global_step")?,
        spec_hash: get("spec_hash")?,
        world_size: num("world_size")? as usize,
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
            epoch: 0,
            global_step: 750,
            spec_hash: String::new(),
            world_size: 1,
        };
        assert_eq!(Mark::of(&state).to_string(), "step 750");
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
