//! The tied output matrix in checkpoints. The model holds one tensor, `transformer.wte.weight`,
//! used as the token embedding and as `lm_head` (the logits are x·wteᵀ); PyTorch's module lists
//! it under both names, so a `model.safetensors` that `load_state_dict(strict=True)` accepts has
//! both. [`tied_state`] adds the second name; [`untie_state`] takes either or both back to one.
//! [`check_positions`] names `model.block` when saved positions do not fit.

use std::collections::HashMap;

use candle_core::{DType, Tensor};

use crate::{Error, Result};

/// The token embedding's name, the one the model's parameter has.
pub const WTE: &str = "transformer.wte.weight";
/// The output projection's name in PyTorch, tied to [`WTE`].
pub const LM_HEAD: &str = "lm_head.weight";
/// The learned positions, `[block, embd]`.
pub const WPE: &str = "transformer.wpe.weight";

/// Refuses saved weights whose learned positions are not the model's `block`, in words of the
/// spec's key (the generic shape message would not say which key to change).
pub fn check_positions(
    tensors: &HashMap<String, Tensor>,
    block: usize,
    source: &str,
) -> Result<()> {
    match tensors.get(WPE).map(|t| t.dims().to_vec()) {
        Some(dims) if dims.first() != Some(&block) => Err(Error::Model(format!(
            "{source}: the model there has {} positions (`{WPE}` {dims:?}) but model.block = {block}: \
             resume with model.block = {}, or start a new run folder",
            dims[0], dims[0]
        ))),
        _ => Ok(()),
    }
}

/// The model's state with `lm_head.weight` (the same tensor as `transformer.wte.weight`) added,
/// in name order.
pub fn tied_state(mut state: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    if let Some(wte) = state.iter().find(|(k, _)| k == WTE).map(|(_, t)| t.clone()) {
        state.retain(|(k, _)| k != LM_HEAD);
        state.push((LM_HEAD.to_string(), wte));
        state.sort_by(|a, b| a.0.cmp(&b.0));
    }
    state
}

/// A saved state with the tied matrix under `transformer.wte.weight` only: `lm_head.weight` is
/// dropped when it equals it, or renamed when it stands alone (a writer that kept one name of
/// the shared tensor). Two different matrices are an error naming `source`: the model ties them.
pub fn untie_state(
    mut tensors: HashMap<String, Tensor>,
    source: &str,
) -> Result<HashMap<String, Tensor>> {
    let Some(head) = tensors.remove(LM_HEAD) else {
        return Ok(tensors);
    };
    match tensors.get(WTE) {
        None => {
            tensors.insert(WTE.to_string(), head);
        }
        Some(wte) => {
            let same = wte.dims() == head.dims()
                && wte
                    .to_dtype(DType::F32)?
                    .ne(&head.to_dtype(DType::F32)?)?
                    .to_dtype(DType::F32)?
                    .sum_all()?
                    .to_scalar::<f32>()?
                    == 0.0;
            if !same {
                return Err(Error::Model(format!(
                    "{source}: `{LM_HEAD}` differs from `{WTE}`; the gpt model ties them \
                     (one matrix), so a checkpoint must hold the same values under both names"
                )));
            }
        }
    }
    Ok(tensors)
}
