//! The sampling figure: [`SAMPLE_TOKENS`] tokens from a trained baby GPT, one at a time through
//! the KV cache, in this process.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::{Device, Tensor};
use ddp_trainer::data::text::Tokenizer;
use ddp_trainer::generate::{Sampling, generate, load_gpt};
use ddp_trainer::models::gpt::GptConfig;

/// Tokens of the sampling figure, and its prompt.
pub const SAMPLE_TOKENS: usize = 500;
const PROMPT: &str = "KING";

/// Sampling [`SAMPLE_TOKENS`] tokens from a trained model.
#[derive(Clone, Debug)]
pub struct SampleFigure {
    /// Reading the tokenizer and `model.safetensors` and building the model.
    pub load_s: f64,
    /// The prompt and the tokens, one at a time through the KV cache.
    pub generate_s: f64,
    pub text: String,
}

impl SampleFigure {
    pub fn json_line(&self, round: Option<u32>) -> String {
        format!(
            "{{\"bench\": \"sample\", \"model\": \"gpt\", \"tokens\": {SAMPLE_TOKENS}, \
             \"load_s\": {:.4}, \"generate_s\": {:.4}, \"tokens_per_s\": {:.1}, \"round\": {}}}",
            self.load_s,
            self.generate_s,
            SAMPLE_TOKENS as f64 / self.generate_s,
            round.map_or("null".to_string(), |r| r.to_string())
        )
    }
}

/// Times [`SAMPLE_TOKENS`] tokens (temperature 1, no top-k, seed 1) from the run in `run_dir`
/// (its `tokenizer.json` and `model.safetensors`), in this process on CPU.
pub fn time_sampling(run_dir: &Path) -> Result<SampleFigure, String> {
    let t0 = Instant::now();
    let tokenizer = Tokenizer::load(&run_dir.join("tokenizer.json")).map_err(|e| e.to_string())?;
    let weights_path = run_dir.join("model.safetensors");
    let weights = read_safetensors(&weights_path)?;
    let cfg = GptConfig::baby(tokenizer.vocab_size());
    let source = weights_path.display().to_string();
    let model = load_gpt(&cfg, weights, &Device::Cpu, &source).map_err(|e| e.to_string())?;
    let prompt = tokenizer.encode(PROMPT).map_err(|e| e.to_string())?;
    let load_s = t0.elapsed().as_secs_f64();
    let opts = Sampling {
        tokens: SAMPLE_TOKENS,
        temperature: 1.0,
        top_k: None,
        seed: 1,
    };
    let t1 = Instant::now();
    let ids = generate(&model, &prompt, &opts, |_| Ok(())).map_err(|e| e.to_string())?;
    let generate_s = t1.elapsed().as_secs_f64();
    let text = PROMPT.to_string() + &tokenizer.decode(&ids).map_err(|e| e.to_string())?;
    Ok(SampleFigure {
        load_s,
        generate_s,
        text,
    })
}

/// The tensors of a safetensors file, on the CPU.
pub fn read_safetensors(path: &Path) -> Result<HashMap<String, Tensor>, String> {
    candle_core::safetensors::load(path, &Device::Cpu)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// One line: the time to sample [`SAMPLE_TOKENS`] tokens.
pub fn print_sample(s: &SampleFigure) {
    println!(
        "sampling {SAMPLE_TOKENS} tokens (prompt \"{PROMPT}\", KV cache, 1 process): {:.3} s \
         ({:.0} tokens/s), loading the model {:.3} s",
        s.generate_s,
        SAMPLE_TOKENS as f64 / s.generate_s,
        s.load_s
    );
}
