//! A replica's own part of a checkpoint of local steps (`STEM.replica-R.safetensors`): its
//! weights, its optimizer's state, and the syncs' state.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use super::{Mark, TrainState, checkpoint_dir, model_path, read_safetensors, write_safetensors};
use crate::optim::Optimizer;
use crate::step::ddp::local::LocalState;
use crate::{Error, Result};

/// Rank `rank`'s own file of the checkpoint whose model file is `model_file` (local steps).
pub fn replica_path(model_file: &Path, rank: usize) -> PathBuf {
    let name = model_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let stem = name
        .as_deref()
        .and_then(|n| n.strip_suffix(".safetensors"))
        .unwrap_or("checkpoint");
    model_file.with_file_name(format!("{stem}.replica-{rank}.safetensors"))
}

/// Writes rank `rank`'s own part of the checkpoint of `state` (local steps): its weights, its
/// optimizer's state, and the syncs' (the global weights, the outer momentum, what the
/// encoding lost, a sync in flight).
pub fn save_replica(
    out: &Path,
    state: &TrainState,
    rank: usize,
    local: &LocalState,
    opt: &Optimizer,
) -> Result<PathBuf> {
    let dir = checkpoint_dir(out);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let path = replica_path(&model_path(out, Mark::of(state)), rank);
    let flat = |name: &str, v: &[f32]| -> Result<(String, Tensor)> {
        Ok((
            name.to_string(),
            Tensor::from_slice(v, v.len(), &Device::Cpu)?,
        ))
    };
    let mut tensors = vec![flat("local", &local.local)?, flat("global", &local.global)?];
    if !local.momentum.is_empty() {
        tensors.push(flat("momentum", &local.momentum)?);
    }
    if !local.residual.is_empty() {
        tensors.push(flat("residual", &local.residual)?);
    }
    if let Some((_, _, avg)) = &local.landing {
        tensors.push(flat("landing", avg)?);
    }
    for (name, v) in opt.config.slot_names().iter().zip(&opt.slots) {
        tensors.push(flat(&format!("optimizer.{name}"), v)?);
    }
    let landing = local
        .landing
        .as_ref()
        .map_or(String::new(), |(f, at, _)| format!("{f}:{at}"));
    let meta: HashMap<String, String> = [
        ("format".to_string(), "ddp-replica-state/1".to_string()),
        ("rank".into(), rank.to_string()),
        ("done".into(), local.done.to_string()),
        ("last_sync".into(), local.last_sync.to_string()),
        ("landing".into(), landing),
        ("optimizer_steps".into(), opt.steps.to_string()),
    ]
    .into_iter()
    .collect();
    write_safetensors(&path, tensors, Some(meta))?;
    Ok(path)
}

/// Reads rank `rank`'s own part of the checkpoint whose model file is `model_file`: the local
/// steps' state and the optimizer's slots (named as `slot_names`) and step count.
pub fn load_replica(
    model_file: &Path,
    rank: usize,
    slot_names: &[&str],
) -> Result<(LocalState, Vec<Vec<f32>>, u64)> {
    let path = replica_path(model_file, rank);
    if !path.exists() {
        return Err(Error::Checkpoint {
            path,
            msg: format!(
                "is missing: a run taking local steps resumes each replica from its own file \
                 beside {} (copy the whole checkpoints folder, or start a new run folder)",
                model_file.display()
            ),
        });
    }
    let (tensors, meta) = read_safetensors(&path)?;
    let bad = |msg: String| Error::Checkpoint {
        path: path.clone(),
        msg,
    };
    let flat = |k: &str| -> Result<Option<Vec<f32>>> {
        tensors
            .get(k)
            .map(|t| Ok(t.flatten_all()?.to_vec1::<f32>()?))
            .transpose()
    };
    let number = |k: &str| -> Result<u64> {
        meta.get(k)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(format!("metadata `{k}` is missing or not a number")))
    };
    let need = |k: &str| -> Result<Vec<f32>> {
        flat(k)?.ok_or_else(|| bad(format!("lacks the tensor `{k}`")))
    };
    let landing = match meta.get("landing").map(String::as_str) {
        None | Some("") => None,
        Some(text) => {
            let parsed = text
                .split_once(':')
                .and_then(|(f, at)| Some((f.parse().ok()?, at.parse().ok()?)));
            let (f, at) = parsed.ok_or_else(|| {
                bad(format!(
                    "metadata `landing` is not `fragment:step`: {text:?}"
                ))
            })?;
            Some((f, at, need("landing")?))
        }
    };
    let state = LocalState {
        done: number("done")?,
        local: need("local")?,
        global: need("global")?,
        momentum: flat("momentum")?.unwrap_or_default(),
        residual: flat("residual")?.unwrap_or_default(),
        landing,
        last_sync: number("last_sync")?,
    };
    let slots = slot_names
        .iter()
        .map(|name| need(&format!("optimizer.{name}")))
        .collect::<Result<_>>()?;
    Ok((state, slots, number("optimizer_steps")?))
}
