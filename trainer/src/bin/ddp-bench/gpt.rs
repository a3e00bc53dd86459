//! The GPT's own figures: the quality run (the full recipe at world 2 on both sides, then both
//! final models evaluated by the same code, ours: the mean cross-entropy over every
//! non-overlapping validation window, `ddp_trainer::lm::eval_sum`), with the sampling time of
//! ours (`sampling.rs`).
//!
//! PyTorch's model is `torch_gpt.py --save`'s state dict (`torch.save`), read with candle's
//! pickle reader and loaded by name into our model, whose logits match PyTorch's to 1e-5
//! (`trainer/tests/gpt_torch.rs`); so both losses come from the same windows, batches and
//! arithmetic.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use ddp_trainer::data::text::{TokenSource, TokenizerKind, load_text};
use ddp_trainer::lm::eval_sum;
use ddp_trainer::models::Network;
use ddp_trainer::models::gpt::{GptConfig, untie_state};

use crate::procs::kib_to_mb;
use crate::rounds::Setup;
use crate::sampling::{SampleFigure, print_sample, read_safetensors, time_sampling};
use crate::torch::TorchFigure;
use crate::train::{Config, Data, TrainFigure, Workload, json_num};

/// The baby GPT's context (`torch_gpt.py --block`).
pub const BLOCK: usize = 64;
/// Windows per batch of the evaluation (the training batch; the sum does not depend on it but
/// for rounding).
const EVAL_BATCH: usize = 12;

/// A `torch.save`d state dict (the zip format of torch ≥ 1.6).
fn read_torch_state(path: &Path) -> Result<HashMap<String, Tensor>, String> {
    let tensors =
        candle_core::pickle::read_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(tensors.into_iter().collect())
}

/// The validation part of `text` as both sides split it: tokenized by character, the last 10 %.
fn validation_tokens(text: &Path) -> Result<(usize, TokenSource), String> {
    let corpus =
        load_text(text, TokenizerKind::Char, None, 0.1, BLOCK).map_err(|e| e.to_string())?;
    Ok((corpus.tokenizer.vocab_size(), corpus.val))
}

/// The mean cross-entropy of a baby GPT holding `state` over every validation window.
fn evaluate_state(
    state: HashMap<String, Tensor>,
    vocab: usize,
    val: &TokenSource,
    source: &str,
) -> Result<f64, String> {
    let cfg = GptConfig::baby(vocab);
    let net = Network::gpt(&cfg, &Device::Cpu, 0).map_err(|e| e.to_string())?;
    let state = untie_state(state, source).map_err(|e| e.to_string())?;
    for (name, var) in &net.params {
        let t = state
            .get(name)
            .ok_or_else(|| format!("{source}: no tensor `{name}`"))?;
        if t.dims() != var.dims() {
            return Err(format!(
                "{source}: `{name}` has shape {:?}, the baby GPT's is {:?}",
                t.dims(),
                var.dims()
            ));
        }
        let t = t
            .to_dtype(candle_core::DType::F32)
            .map_err(|e| e.to_string())?;
        var.set(&t).map_err(|e| e.to_string())?;
    }
    let sum = eval_sum(&net, val, BLOCK, 0, 1, EVAL_BATCH).map_err(|e| e.to_string())?;
    Ok(sum.mean())
}

/// Both sides' full runs and their models evaluated alike.
pub struct Quality {
    pub workload: Workload,
    pub ours: TrainFigure,
    pub torch: Option<TorchFigure>,
    /// Our final model, evaluated here.
    pub ours_loss: f64,
    /// PyTorch's final model, evaluated here by the same code.
    pub torch_loss: Option<f64>,
    pub sample: SampleFigure,
}

impl Quality {
    pub fn json_line(&self) -> String {
        format!(
            "{{\"bench\": \"quality\", \"model\": \"gpt\", \"world\": 2, \"steps\": {}, \
             \"ddp_tokens_per_s\": {:.1}, \"torch_tokens_per_s\": {}, \"ddp_val_loss\": {:.4}, \
             \"ddp_val_loss_in_run\": {}, \"torch_val_loss\": {}, \
             \"torch_val_loss_random_batches\": {}, \"ddp_peak_rss_mb\": {}, \
             \"torch_peak_rss_mb\": {}}}",
            self.workload.steps,
            self.ours.samples_per_s,
            json_num(self.torch.as_ref().map(|t| t.samples_per_s), 1),
            self.ours_loss,
            json_num(self.ours.val_loss, 4),
            json_num(self.torch_loss, 4),
            json_num(self.torch.as_ref().and_then(|t| t.val_loss), 4),
            json_num(self.ours.peak_rss_kib.map(kib_to_mb), 1),
            json_num(
                self.torch
                    .as_ref()
                    .and_then(|t| t.peak_rss_kib)
                    .map(kib_to_mb),
                1
            ),
        )
    }
}

/// The full recipe at world 2 × 1 thread, PyTorch's run first (it saves its state dict), then
/// ours; both final models evaluated over every validation window; sampling from ours.
pub fn bench_quality(setup: &Setup, w: &Workload) -> Result<Quality, String> {
    let Data::Text(text) = &w.data else {
        return Err("the quality run is the GPT's (--model gpt)".into());
    };
    let two = Config::ddp(2, 1);
    let (vocab, val) = validation_tokens(text)?;
    let torch = match &setup.torch {
        Some(t) => {
            let saved = setup.trainer.tmp.join("torch-gpt-quality.pt");
            eprintln!(
                "ddp-bench: PyTorch: torch_gpt.py, the full recipe ({} steps) at world 2 ...",
                w.steps
            );
            let figure = t.run(w, two, "-quality", Some(&saved))?;
            let state = read_torch_state(&saved)?;
            let loss = evaluate_state(state, vocab, &val, &saved.display().to_string())?;
            Some((figure, loss))
        }
        None => None,
    };
    eprintln!(
        "ddp-bench: training the gpt, the full recipe ({} steps) at world 2 ...",
        w.steps
    );
    let ours = setup.trainer.run(w, two, "-quality")?;
    let weights = ours.run_dir.join("model.safetensors");
    let ours_loss = evaluate_state(
        read_safetensors(&weights)?,
        vocab,
        &val,
        &weights.display().to_string(),
    )?;
    let sample = time_sampling(&ours.run_dir)?;
    let (torch, torch_loss) = match torch {
        Some((f, l)) => (Some(f), Some(l)),
        None => (None, None),
    };
    Ok(Quality {
        workload: w.clone(),
        ours,
        torch,
        ours_loss,
        torch_loss,
        sample,
    })
}

/// The quality table.
pub fn print_quality(q: &Quality, torch_version: Option<&str>) {
    println!();
    println!(
        "GPT quality: the full recipe, {}, world 2 x 1 thread, batch {} per replica; validation \
         loss = mean cross-entropy over every non-overlapping {BLOCK}-token window of the last \
         10 %, both models evaluated by ddp-trainer's evaluation",
        q.workload.describe(),
        q.workload.batch,
    );
    let torch_name = torch_version.map_or("PyTorch".to_string(), |v| format!("PyTorch {v}"));
    println!("{:<44} {:>12} {:>16}", "", "ddp-trainer", torch_name);
    let cell =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let t = q.torch.as_ref();
    println!(
        "{:<44} {:>12.4} {:>16}",
        "validation loss (all windows)",
        q.ours_loss,
        cell(q.torch_loss, 4)
    );
    println!(
        "{:<44} {:>12} {:>16}",
        "validation loss, each side's own report",
        cell(q.ours.val_loss, 4),
        cell(t.and_then(|t| t.val_loss), 4)
    );
    println!(
        "{:<44} {:>12.1} {:>16}",
        "tokens/s",
        q.ours.samples_per_s,
        cell(t.map(|t| t.samples_per_s), 1)
    );
    println!(
        "{:<44} {:>12} {:>16}",
        "peak RSS MB (largest process)",
        cell(q.ours.peak_rss_kib.map(kib_to_mb), 0),
        cell(t.and_then(|t| t.peak_rss_kib).map(kib_to_mb), 0)
    );
    if let Some(tl) = q.torch_loss {
        println!(
            "ddp - PyTorch validation loss: {:+.4} (target: at most +0.02)",
            q.ours_loss - tl
        );
    }
    println!(
        "(own reports: ddp's is the same evaluation in the run; torch_gpt.py's is the mean of 20 \
         random validation batches)"
    );
    print_sample(&q.sample);
    let excerpt: String = q.sample.text.chars().take(300).collect();
    println!("--- the first 300 characters ---\n{excerpt}\n---");
}
