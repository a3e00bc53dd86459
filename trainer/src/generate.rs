//! Text generation from a trained GPT: one token at a time through the KV cache, sampled with a
//! temperature and top-k from a generator seeded by the caller, so the same seed gives the same
//! text.
//!
//! - [`load_gpt`]: a [`Gpt`] of a spec's shape with the weights of a `model.safetensors` (or a
//!   checkpoint), the tied `lm_head.weight` accepted; [`load_gpt_file`] reads them from the file.
//! - [`generate`]: continues a prompt by `tokens` ids, handing each to a callback as it comes
//!   (for streaming). When the context fills the model's `block` positions, the cache restarts
//!   from the last `block / 2` tokens (positions are learned, so a cache cannot slide).
//! - [`pick`]: the sampling rule on one position's logits, a pure function of the logits and
//!   the generator.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};

use crate::data::rng::SplitMix64;
use crate::models::gpt::{self, Gpt, GptConfig};
use crate::{Error, Result};

/// How to sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Ids to generate after the prompt.
    pub tokens: usize,
    /// Logits are divided by it; 0 takes the most likely id (greedy).
    pub temperature: f64,
    /// Only the `k` most likely ids are drawn from (none: all).
    pub top_k: Option<usize>,
    pub seed: u64,
}

/// A GPT of shape `cfg` holding `weights` (a state dict with PyTorch's names; `lm_head.weight`
/// may stand beside or instead of `transformer.wte.weight`). `source` names them in errors.
pub fn load_gpt(
    cfg: &GptConfig,
    weights: HashMap<String, Tensor>,
    device: &Device,
    source: &str,
) -> Result<Gpt> {
    let weights = gpt::untie_state(weights, source)?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, device);
    let model = gpt::gpt(cfg, vb)?;
    let vars = varmap.data().lock().expect("varmap poisoned");
    for (name, var) in vars.iter() {
        let t = weights
            .get(name)
            .ok_or_else(|| Error::Model(format!("{source}: missing tensor `{name}`")))?;
        if t.dims() != var.dims() {
            return Err(Error::Model(format!(
                "{source}: tensor `{name}` has shape {:?}, the spec's gpt needs {:?} (was the run trained with another model.block/embd/layers?)",
                t.dims(),
                var.dims()
            )));
        }
        var.set(&t.to_device(device)?.to_dtype(DType::F32)?)?;
    }
    Ok(model)
}

/// A GPT of shape `cfg` on the CPU (where [`generate`] runs) holding the weights of the model
/// file `path` (a checkpoint's or `model.safetensors`); errors name the file.
pub fn load_gpt_file(cfg: &GptConfig, path: &Path) -> Result<Gpt> {
    let weights = crate::checkpoint::read_model(path)?;
    load_gpt(cfg, weights, &Device::Cpu, &path.display().to_string())
}

/// Continues `prompt` (at least one id) by `opts.tokens` ids, calling `on_token` with each as
/// soon as it is drawn; returns them.
pub fn generate(
    model: &Gpt,
    prompt: &[u32],
    opts: &Sampling,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Vec<u32>> {
    let cfg = *model.config();
    if prompt.is_empty() {
        return Err(Error::Model(
            "generation needs a prompt of at least one token".into(),
        ));
    }
    if let Some(&bad) = prompt.iter().find(|&&id| id as usize >= cfg.vocab) {
        return Err(Error::Model(format!(
            "prompt id {bad} is outside the model's vocabulary of {}",
            cfg.vocab
        )));
    }
    let device = Device::Cpu;
    let mut rng = SplitMix64::keyed(&[opts.seed, 0x5341_4d50]); // "SAMP"
    let mut context: Vec<u32> = prompt.to_vec();
    let mut cache = model.new_cache();
    // Feed the prompt's last `block` ids at once.
    let start = context.len().saturating_sub(cfg.block);
    let mut logits = feed(model, &context[start..], &mut cache, &device)?;
    // Grown as drawn: a huge `tokens` (stopped by the caller) reserves nothing up front.
    let mut out = Vec::with_capacity(opts.tokens.min(1 << 16));
    for _ in 0..opts.tokens {
        let id = pick(&logits, opts, &mut rng);
        on_token(id)?;
        out.push(id);
        context.push(id);
        if cache.len() == cfg.block {
            // The context is full: start again from the last half of it.
            cache = model.new_cache();
            let keep = (cfg.block / 2).max(1);
            logits = feed(model, &context[context.len() - keep..], &mut cache, &device)?;
        } else {
            logits = feed(model, &[id], &mut cache, &device)?;
        }
    }
    Ok(out)
}

/// The logits of the last of `ids` after feeding them through the cache.
fn feed(model: &Gpt, ids: &[u32], cache: &mut gpt::Cache, device: &Device) -> Result<Vec<f32>> {
    let x = Tensor::from_slice(ids, (1, ids.len()), device)?;
    let logits = model.forward_cached(&x, cache)?;
    let (_, n, _) = logits.dims3()?;
    Ok(logits
        .narrow(1, n - 1, 1)?
        .flatten_all()?
        .to_vec1::<f32>()?)
}

/// One id drawn from `logits`: the most likely at temperature 0, else from
/// softmax(logits / temperature) over the `top_k` most likely (ties keep the lower id).
pub fn pick(logits: &[f32], opts: &Sampling, rng: &mut SplitMix64) -> u32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if opts.temperature <= 0.0 {
        return order[0] as u32;
    }
    let k = opts.top_k.unwrap_or(logits.len()).clamp(1, logits.len());
    let top = &order[..k];
    let max = logits[top[0]] as f64;
    let weights: Vec<f64> = top
        .iter()
        .map(|&i| ((logits[i] as f64 - max) / opts.temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.next_f64() * total;
    for (w, &i) in weights.iter().zip(top) {
        if u < *w {
            return i as u32;
        }
        u -= w;
    }
    top[k - 1] as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Network;

    fn model() -> Gpt {
        let cfg = GptConfig::new(11, 8, 1, 2, 16);
        let net = Network::gpt(&cfg, &Device::Cpu, 9).unwrap();
        let state: HashMap<String, Tensor> = net.state().into_iter().collect();
        load_gpt(&cfg, state, &Device::Cpu, "test").unwrap()
    }

    fn opts(temperature: f64, top_k: Option<usize>, seed: u64) -> Sampling {
        Sampling {
            tokens: 30,
            temperature,
            top_k,
            seed,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_text_past_the_context() {
        let m = model();
        let run = |o: &Sampling| generate(&m, &[1, 2, 3], o, |_| Ok(())).unwrap();
        let a = run(&opts(1.0, None, 5));
        assert_eq!(a.len(), 30, "30 ids, well past the block of 8");
        assert_eq!(a, run(&opts(1.0, None, 5)));
        assert_ne!(a, run(&opts(1.0, None, 6)));
        assert!(a.iter().all(|&id| id < 11));
        // top-k 1 and temperature 0 are both greedy.
        assert_eq!(run(&opts(1.0, Some(1), 5)), run(&opts(0.0, None, 7)));
        // Streamed as drawn.
        let mut seen = Vec::new();
        let b = generate(&m, &[1, 2, 3], &opts(0.8, Some(4), 5), |id| {
            seen.push(id);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, b);
    }

    #[test]
    fn a_model_file_loads_and_is_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = GptConfig::new(11, 8, 1, 2, 16);
        let net = Network::gpt(&cfg, &Device::Cpu, 9).unwrap();
        let path = crate::checkpoint::save_final(dir.path(), &net).unwrap();
        let from_file = load_gpt_file(&cfg, &path).unwrap();
        let o = opts(1.0, None, 3);
        let run = |m: &Gpt| generate(m, &[1], &o, |_| Ok(())).unwrap();
        assert_eq!(run(&from_file), run(&model()));
        let missing = dir.path().join("nope.safetensors");
        let e = load_gpt_file(&cfg, &missing).err().unwrap();
        assert!(e.to_string().contains("nope.safetensors"), "{e}");
    }

    #[test]
    fn pick_follows_temperature_and_top_k() {
        let logits = [0.0f32, 2.0, 1.0, 2.0];
        let mut rng = SplitMix64::new(1);
        // Greedy: the first of the tied maxima.
        assert_eq!(pick(&logits, &opts(0.0, None, 0), &mut rng), 1);
        // Top-2 draws only ids 1 and 3 (the two largest), about evenly.
        let mut counts = [0usize; 4];
        for _ in 0..2000 {
            counts[pick(&logits, &opts(1.0, Some(2), 0), &mut rng) as usize] += 1;
        }
        assert_eq!(counts[0] + counts[2], 0);
        assert!((800..1200).contains(&counts[1]), "{counts:?}");
    }

    #[test]
    fn bad_prompts_and_weights_are_refused_by_name() {
        let m = model();
        let e = generate(&m, &[], &opts(1.0, None, 1), |_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("at least one token"), "{e}");
        let e = generate(&m, &[11], &opts(1.0, None, 1), |_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("prompt id 11 is outside"), "{e}");
        let cfg = GptConfig::new(11, 8, 1, 2, 16);
        let wider = GptConfig::new(11, 16, 1, 2, 16);
        let state: HashMap<String, Tensor> = Network::gpt(&cfg, &Device::Cpu, 1)
            .unwrap()
            .state()
            .into_iter()
            .collect();
        let e = load_gpt(&wider, state, &Device::Cpu, "model.safetensors")
            .err()
            .unwrap();
        assert!(e.to_string().contains("transformer.wpe.weight"), "{e}");
    }
}
