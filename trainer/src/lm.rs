//! The language-model side of a run: its token data (a text file tokenized, or token files
//! mapped), the tokenizer kept in the run folder, the loss of a batch of windows, and the
//! deterministic evaluation every rank shares.
//!
//! - [`LmData::load`]: `data.name = "text"` tokenizes `data.path` (on resume with the run's own
//!   `tokenizer.json`, so ids keep their meaning) and splits it; `"tokens"` maps
//!   `data.path/train.bin` and `val.bin`, every id checked against `data.vocab_size`.
//! - [`batch_loss`]: the mean next-token cross-entropy of an [`LmBatch`].
//! - [`eval_sum`] and [`evaluate`]: the validation loss over all non-overlapping windows, each
//!   rank taking its share and the sums all-reduced, so the figure does not depend on the world
//!   size.

use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Tensor};

use crate::data::text::corpus::check_text;
use crate::data::text::windows::check_part_len;
use crate::data::text::{
    EvalSum, EvalWindows, LmBatch, TOKENIZER_FILE, TokenDtype, TokenSource, Tokenizer, load_text,
};
use crate::dist::ReduceOp;
use crate::models::Network;
use crate::models::gpt::{GptConfig, lm_loss};
use crate::report::Evaluation;
use crate::spec::{DataName, Spec};
use crate::step::comm::{SharedCollective, with_comm};
use crate::{Error, Result};

/// A language model's tokens: the training and validation parts, the vocabulary size and the
/// context length the windows have.
pub struct LmData {
    /// The text's tokenizer (`text` data); token files come tokenized.
    pub tokenizer: Option<Tokenizer>,
    pub vocab: usize,
    pub block: usize,
    pub train: TokenSource,
    pub val: TokenSource,
}

impl LmData {
    /// The token data of `spec`. For text, the tokenizer of the run folder `out` is reused when it
    /// has one (a resumed run), else built from the text; `save` writes it there (rank 0).
    pub fn load(spec: &Spec, out: &Path, save: bool) -> Result<LmData> {
        let block = GptConfig::from_spec(spec, 1).block;
        let path = spec.data.path.clone().unwrap_or_default();
        match spec.data.name {
            DataName::Text => {
                let saved = out.join(TOKENIZER_FILE);
                let tokenizer = if saved.is_file() {
                    Some(Tokenizer::load(&saved)?)
                } else {
                    None
                };
                let kind = spec.data.tokenizer.unwrap_or_default();
                if let Some(t) = &tokenizer
                    && t.kind() != kind
                {
                    return Err(Error::data(
                        &saved,
                        format!(
                            "this run was tokenized with data.tokenizer = \"{}\", the spec says \"{kind}\"; resume with the run's own spec",
                            t.kind()
                        ),
                    ));
                }
                let corpus = load_text(&path, kind, tokenizer, spec.data.val_fraction, block)?;
                if save {
                    corpus.tokenizer.save(&saved)?;
                }
                Ok(LmData {
                    vocab: corpus.tokenizer.vocab_size(),
                    tokenizer: Some(corpus.tokenizer),
                    block,
                    train: corpus.train,
                    val: corpus.val,
                })
            }
            DataName::Tokens => {
                let vocab = spec.data.vocab_size.unwrap_or(0);
                let dtype = spec.data.dtype.unwrap_or_default();
                let part = |(file, what)| token_part(&path, file, what, dtype, Some(vocab), block);
                Ok(LmData {
                    tokenizer: None,
                    vocab,
                    block,
                    train: part(TOKEN_PARTS[0])?,
                    val: part(TOKEN_PARTS[1])?,
                })
            }
            other => Err(Error::data(
                path,
                format!("data.name = {other:?} is not token data for a language model"),
            )),
        }
    }

    /// Checks the token data of a new run's `spec` as [`LmData::load`] would refuse it, with the
    /// same code and messages, at the cost of reading what a replica reads whole anyway: a text
    /// is read and checked (not empty, UTF-8 for the `char` tokenizer, each part a window long)
    /// but its tokens are not kept; token files are mapped and their lengths checked (a multiple
    /// of the id size, each part a window long), not their ids (that reads every page of them:
    /// the replicas do it). Other data: nothing to check here.
    pub fn check(spec: &Spec) -> Result<()> {
        let block = GptConfig::from_spec(spec, 1).block;
        let path = spec.data.path.clone().unwrap_or_default();
        match spec.data.name {
            DataName::Text => check_text(
                &path,
                spec.data.tokenizer.unwrap_or_default(),
                spec.data.val_fraction,
                block,
            ),
            DataName::Tokens => {
                let dtype = spec.data.dtype.unwrap_or_default();
                for (file, what) in TOKEN_PARTS {
                    token_part(&path, file, what, dtype, None, block)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The token files of `data.name = "tokens"`, and what their parts are called in messages.
const TOKEN_PARTS: [(&str, &str); 2] = [("train.bin", "training"), ("val.bin", "validation")];

/// Maps the token file `dir/file` of `dtype` ids and checks that it holds at least one window of
/// `block + 1` tokens and, with `vocab`, that every id is below it (which reads the whole file).
fn token_part(
    dir: &Path,
    file: &str,
    what: &str,
    dtype: TokenDtype,
    vocab: Option<usize>,
    block: usize,
) -> Result<TokenSource> {
    let p = dir.join(file);
    let src = match vocab {
        Some(vocab) => TokenSource::map(&p, dtype, vocab)?,
        None => TokenSource::map_unchecked(&p, dtype)?,
    };
    check_part_len(
        &p,
        what,
        src.len(),
        block,
        "use a longer file or a smaller model.block",
    )?;
    Ok(src)
}

/// Checks that a language model `net` (a custom one: the GPT is built to fit) maps token ids
/// `[B, T]` to logits `[B, T, vocab]`, on one window of `block` zeros; the error says what it
/// returned and what the data needs.
pub fn check_logits(net: &Network, vocab: usize, block: usize) -> Result<()> {
    let ids = Tensor::zeros((1, block), DType::U32, &net.device)?;
    let out = net.forward(&ids, false).map_err(|e| {
        Error::Model(format!(
            "the model failed on token ids of shape [1, {block}] (u32): {e}; a language model takes ids [batch, time] and returns logits [batch, time, vocab]"
        ))
    })?;
    if out.dims() != [1, block, vocab] {
        return Err(Error::Model(format!(
            "the model returns shape {:?} for token ids [1, {block}]; the data's vocabulary has {vocab} ids, so a language model must return logits [batch, time, {vocab}]",
            out.dims()
        )));
    }
    Ok(())
}

/// The mean next-token cross-entropy of `batch` (inputs and targets `[rows, block]`).
pub fn batch_loss(net: &Network, batch: &LmBatch, train: bool) -> Result<Tensor> {
    let shape = (batch.rows, batch.block);
    let ids = Tensor::from_slice(&batch.inputs, shape, &net.device)?;
    let targets = Tensor::from_slice(&batch.targets, shape, &net.device)?;
    Ok(lm_loss(&net.forward(&ids, train)?, &targets)?)
}

/// The loss sum over this rank's share of the evaluation windows of `val` (see
/// [`EvalWindows::for_rank`]), in batches of `batch_size` windows.
pub fn eval_sum(
    net: &Network,
    val: &TokenSource,
    block: usize,
    rank: usize,
    world: usize,
    batch_size: usize,
) -> Result<EvalSum> {
    let windows = EvalWindows::new(val.len(), block);
    let mut sum = EvalSum::default();
    let mut batch = LmBatch::new();
    for range in EvalWindows::batches(windows.for_rank(rank, world), batch_size.max(1)) {
        windows.fill(val, range, &mut batch);
        let loss = batch_loss(net, &batch, false)?.to_scalar::<f32>()?;
        sum.add_batch(loss as f64, batch.rows);
    }
    Ok(sum)
}

/// The validation loss over every evaluation window, the same on every rank whatever the world
/// size: each rank's [`eval_sum`] is all-reduced as a pair of f32 (high part and remainder) per
/// figure, which keeps the sum to about f64's precision.
pub fn evaluate(
    net: &Network,
    val: &TokenSource,
    block: usize,
    rank: usize,
    world: usize,
    batch_size: usize,
    comm: &SharedCollective,
) -> Result<Evaluation> {
    let t0 = Instant::now();
    let mine = eval_sum(net, val, block, rank, world, batch_size)?;
    let mut parts = split_f64(mine.to_array());
    with_comm(comm, |c| c.all_reduce(&mut parts, ReduceOp::Sum))?;
    let total = EvalSum::from_array(join_f64(parts));
    let windows = total.windows as usize;
    Ok(Evaluation {
        loss: total.mean(),
        accuracy: None,
        samples: windows,
        samples_per_sec: windows as f64 / t0.elapsed().as_secs_f64().max(1e-9),
        metrics: Vec::new(),
    })
}

/// Each value as an f32 and the f32 of what that leaves out: sums of the pairs keep ~48 bits.
fn split_f64<const N: usize>(values: [f64; N]) -> Vec<f32> {
    values
        .iter()
        .flat_map(|&v| {
            let hi = v as f32;
            [hi, (v - hi as f64) as f32]
        })
        .collect()
}

fn join_f64<const N: usize>(parts: Vec<f32>) -> [f64; N] {
    let mut out = [0.0; N];
    for (i, pair) in parts.chunks(2).enumerate().take(N) {
        out[i] = pair[0] as f64 + pair[1] as f64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    const TEXT: &str = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\nThe slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles\n";

    fn spec(dir: &Path, extra: &[&str]) -> Spec {
        std::fs::write(dir.join("input.txt"), TEXT).unwrap();
        let text = "name = \"lm\"\n[model]\nname = \"gpt\"\nlayers = 1\nheads = 2\nembd = 8\nblock = 8\n[data]\nname = \"text\"\npath = \"input.txt\"\nval_fraction = 0.25\n[train]\nsteps = 10\n";
        let o: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Spec::parse_at(text, &dir.join("lm.toml"), &o).unwrap()
    }

    #[test]
    fn text_data_is_split_and_its_tokenizer_kept_in_the_run_folder() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(dir.path(), &[]);
        let out = dir.path().join("run");
        std::fs::create_dir(&out).unwrap();
        let d = LmData::load(&s, &out, true).unwrap();
        let n = TEXT.chars().count();
        assert_eq!(d.train.len() + d.val.len(), n);
        assert_eq!(d.train.len(), (n as f64 * 0.75).floor() as usize);
        assert_eq!(d.block, 8);
        let saved = Tokenizer::load(&out.join(TOKENIZER_FILE)).unwrap();
        assert_eq!(saved.vocab_size(), d.vocab);
        // Resumed with a byte tokenizer in the spec: refused, naming the saved one.
        let e = LmData::load(&spec(dir.path(), &["data.tokenizer=\"byte\""]), &out, false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("tokenized with data.tokenizer = \"char\""),
            "{e}"
        );
    }

    #[test]
    fn the_up_front_check_refuses_what_loading_refuses_with_the_same_message() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let refusals = |s: &Spec| {
            let checked = LmData::check(s).err().map(|e| e.to_string());
            let loaded = LmData::load(s, &out, false).err().map(|e| e.to_string());
            assert_eq!(checked, loaded);
            checked
        };
        let byte = spec(dir.path(), &["data.tokenizer=\"byte\""]);
        let s = spec(dir.path(), &[]);
        assert_eq!(refusals(&s), None);
        let mut bad = TEXT.as_bytes().to_vec();
        bad[20] = 0xfe;
        std::fs::write(dir.path().join("input.txt"), &bad).unwrap();
        let e = refusals(&s).unwrap();
        assert!(
            e.contains("the byte 0xfe at offset 20 is not valid UTF-8"),
            "{e}"
        );
        // The same bytes are a fine text for the byte tokenizer.
        assert_eq!(refusals(&byte), None);
        // A validation part shorter than a window.
        let e = refusals(&spec(dir.path(), &["data.val_fraction=0.01"])).unwrap();
        assert!(e.contains("the validation part has 2 tokens"), "{e}");
        // Token files: their lengths are checked, their ids only when loading.
        let tokens = dir.path().join("tokens");
        std::fs::create_dir(&tokens).unwrap();
        let ids: Vec<u8> = (0..40u16).flat_map(u16::to_le_bytes).collect();
        std::fs::write(tokens.join("train.bin"), &ids).unwrap();
        std::fs::write(tokens.join("val.bin"), &ids[..20]).unwrap();
        let token_spec = |dir: &Path, vocab: usize| {
            let text = format!(
                "name = \"lm\"\n[model]\nname = \"gpt\"\nlayers = 1\nheads = 2\nembd = 8\nblock = 8\n[data]\nname = \"tokens\"\npath = \"tokens\"\nvocab_size = {vocab}\n[train]\nsteps = 10\n"
            );
            Spec::parse_at(&text, &dir.join("lm.toml"), &[]).unwrap()
        };
        assert_eq!(refusals(&token_spec(dir.path(), 40)), None);
        let s = token_spec(dir.path(), 30);
        LmData::check(&s).unwrap();
        let e = LmData::load(&s, &out, false).err().unwrap().to_string();
        assert!(
            e.contains("token 30 has id 30, not below vocab_size = 30"),
            "{e}"
        );
        std::fs::write(tokens.join("val.bin"), &ids[..21]).unwrap();
        let e = refusals(&token_spec(dir.path(), 40)).unwrap();
        assert!(e.contains("val.bin: the token file has 21 bytes"), "{e}");
        std::fs::write(tokens.join("val.bin"), &ids[..16]).unwrap();
        let e = refusals(&token_spec(dir.path(), 40)).unwrap();
        assert!(e.contains("the validation part has 8 tokens"), "{e}");
        std::fs::remove_file(tokens.join("val.bin")).unwrap();
        assert!(refusals(&token_spec(dir.path(), 40)).is_some());
    }

    #[test]
    fn the_evaluation_does_not_depend_on_the_world_size() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(dir.path(), &[]);
        let d = LmData::load(&s, dir.path(), false).unwrap();
        let cfg: GptConfig = GptConfig::from_spec(&s, d.vocab);
        let net = Network::gpt(&cfg, &Device::Cpu, 5).unwrap();
        let whole = eval_sum(&net, &d.val, d.block, 0, 1, 3).unwrap();
        assert_eq!(
            whole.windows as usize,
            EvalWindows::new(d.val.len(), 8).count()
        );
        for world in 2..=4 {
            let mut total = EvalSum::default();
            for rank in 0..world {
                total.merge(eval_sum(&net, &d.val, d.block, rank, world, 2).unwrap());
            }
            assert_eq!(total.windows, whole.windows);
            assert!(
                (total.mean() - whole.mean()).abs() < 1e-6,
                "world {world}: {} vs {}",
                total.mean(),
                whole.mean()
            );
        }
        let e = evaluate(
            &net,
            &d.val,
            d.block,
            0,
            1,
            3,
            &crate::step::ddp::tests::solo(),
        )
        .unwrap();
        assert!((e.loss - whole.mean()).abs() < 1e-12);
        assert_eq!(e.samples, whole.windows as usize);
    }

    #[test]
    fn f64_sums_survive_an_f32_all_reduce() {
        let v = [12_345.678_901_234_f64, 1.0e-3];
        let back: [f64; 2] = join_f64(split_f64(v));
        assert!((back[0] - v[0]).abs() < 1e-9 && (back[1] - v[1]).abs() < 1e-12);
    }
}
