//! Text and token data for language modelling: tokenizers, token streams (in memory or
//! memory-mapped), and the windows a language model trains and evaluates on.
//!
//! Layout:
//! - [`tokenizer`]: the `char` and `byte` tokenizers, `tokenizer.json`, the UTF-8 check.
//! - [`tokens`]: [`TokenSource`], ids in memory or mapped from `u16`/`u32` token files, with
//!   the length and vocabulary checks.
//! - [`corpus`]: a text file read, tokenized and split into training and validation parts.
//! - [`windows`]: the training windows of a step (a function of seed, step and global window
//!   index, so the world size and resuming do not change them), the deterministic evaluation
//!   windows and their per-rank shares, [`LmBatch`], and the loss sums an evaluation all-reduces.

pub mod corpus;
pub mod tokenizer;
pub mod tokens;
pub mod windows;

pub use corpus::{TextCorpus, load_text, split_tokens, tokenize_file, train_len};
pub use tokenizer::{TOKENIZER_FILE, Tokenizer, TokenizerKind};
pub use tokens::{TokenDtype, TokenSource};
pub use windows::{EvalSum, EvalWindows, LmBatch, TrainWindows, bits_per_token, perplexity};
