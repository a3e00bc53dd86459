//! A text file as a language-modelling corpus: read, tokenized and split into a training and a
//! validation part, as the PyTorch reference (`torch_gpt.py`) splits it.
//!
//! The whole file is tokenized (the `char` vocabulary comes from all of it), then the first
//! `⌊(1 − val_fraction)·N⌋` of its `N` tokens train and the rest validate: contiguous parts, no
//! shuffle. The file's bytes are taken as they are (no newline translation; Python's text mode
//! would turn `\r\n` into `\n`).

use std::path::Path;

use super::tokenizer::{Tokenizer, TokenizerKind, utf8};
use super::tokens::TokenSource;
use super::windows::check_part_len;
use crate::error::{Error, Result};

/// A tokenized text split into its two parts.
#[derive(Clone, Debug)]
pub struct TextCorpus {
    pub tokenizer: Tokenizer,
    /// The first `⌊(1 − val_fraction)·N⌋` tokens.
    pub train: TokenSource,
    /// The remaining tokens (empty when `val_fraction` is 0).
    pub val: TokenSource,
}

/// The bytes of the text file `path`; an empty file is an error.
pub fn read_text_file(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if bytes.is_empty() {
        return Err(Error::data(
            path,
            "the text file is empty; give a file with the text to train on",
        ));
    }
    Ok(bytes)
}

/// Reads `path` and tokenizes it with a new tokenizer of `kind` (for `char`, the file's sorted
/// distinct characters). A `char` file must be UTF-8: the error names the first bad byte's offset.
pub fn tokenize_file(path: &Path, kind: TokenizerKind) -> Result<(Tokenizer, Vec<u32>)> {
    let bytes = read_text_file(path)?;
    let tokenizer = match kind {
        TokenizerKind::Byte => Tokenizer::byte(path),
        TokenizerKind::Char => Tokenizer::char_from_text(utf8(&bytes, path)?, path),
    };
    let ids = tokenizer.encode_bytes(&bytes)?;
    Ok((tokenizer, ids))
}

/// Reads `path` and tokenizes it with an existing tokenizer (a resumed run's `tokenizer.json`);
/// a character outside its vocabulary is an error.
pub fn encode_file(path: &Path, tokenizer: &Tokenizer) -> Result<Vec<u32>> {
    let bytes = read_text_file(path)?;
    match tokenizer.kind() {
        TokenizerKind::Byte => tokenizer.encode_bytes(&bytes),
        TokenizerKind::Char => tokenizer.encode(utf8(&bytes, path)?).map_err(|e| match e {
            Error::Data { msg, .. } => Error::data(
                path,
                format!("{msg} (the vocabulary of {})", tokenizer.origin().display()),
            ),
            e => e,
        }),
    }
}

/// Tokens in the training part of `n` tokens: `⌊(1 − val_fraction)·n⌋` (Python's
/// `int((1 - val_fraction) * n)`).
pub fn train_len(n: usize, val_fraction: f64) -> usize {
    (((1.0 - val_fraction) * n as f64).floor() as usize).min(n)
}

/// Splits the `ids` of the text file `path` into (train, validation) parts. `val_fraction` must
/// lie in `[0, 1)`; each part must hold at least `block + 1` tokens (the validation part only when
/// `val_fraction` > 0), else the error names the sizes and what to change.
pub fn split_tokens(
    path: &Path,
    ids: Vec<u32>,
    val_fraction: f64,
    block: usize,
) -> Result<(TokenSource, TokenSource)> {
    let n = ids.len();
    let cut = check_split(path, n, val_fraction, block)?;
    let all = TokenSource::memory(ids);
    Ok((all.slice(0..cut), all.slice(cut..n)))
}

/// Checks the text file `path` as [`load_text`] reads it for a new run, without keeping its
/// tokens: not empty, UTF-8 for a `char` tokenizer (the first bad byte named by its offset), and
/// both parts at least one window long. The same errors as [`load_text`], from the same code.
pub fn check_text(path: &Path, kind: TokenizerKind, val_fraction: f64, block: usize) -> Result<()> {
    let bytes = read_text_file(path)?;
    let n = match kind {
        TokenizerKind::Byte => bytes.len(),
        // A fresh tokenizer holds every character of the text: one token per character.
        TokenizerKind::Char => utf8(&bytes, path)?.chars().count(),
    };
    check_split(path, n, val_fraction, block).map(drop)
}

/// Where [`split_tokens`] cuts `n` tokens of `path`, after checking `val_fraction` and that each
/// part holds a window.
fn check_split(path: &Path, n: usize, val_fraction: f64, block: usize) -> Result<usize> {
    if !(0.0..1.0).contains(&val_fraction) {
        return Err(Error::data(
            path,
            format!("val_fraction = {val_fraction} is outside [0, 1)"),
        ));
    }
    let cut = train_len(n, val_fraction);
    let sizes = format!("the text has {n} tokens and val_fraction = {val_fraction}");
    check_part_len(
        path,
        "training",
        cut,
        block,
        &format!("{sizes}; use a longer text, a smaller val_fraction or a smaller block"),
    )?;
    if val_fraction > 0.0 {
        check_part_len(
            path,
            "validation",
            n - cut,
            block,
            &format!("{sizes}; use a longer text, a larger val_fraction or a smaller block"),
        )?;
    }
    Ok(cut)
}

/// [`tokenize_file`] (or [`encode_file`] with `tokenizer`, on resume) then [`split_tokens`].
pub fn load_text(
    path: &Path,
    kind: TokenizerKind,
    tokenizer: Option<Tokenizer>,
    val_fraction: f64,
    block: usize,
) -> Result<TextCorpus> {
    let (tokenizer, ids) = match tokenizer {
        Some(t) => {
            let ids = encode_file(path, &t)?;
            (t, ids)
        }
        None => tokenize_file(path, kind)?,
    };
    let (train, val) = split_tokens(path, ids, val_fraction, block)?;
    Ok(TextCorpus {
        tokenizer,
        train,
        val,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &tempfile::TempDir, bytes: &[u8]) -> std::path::PathBuf {
        let p = dir.path().join("input.txt");
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn reads_tokenizes_and_splits_like_the_reference() {
        let dir = tempfile::tempdir().unwrap();
        let text = "To be, or not to be: that is the question.\nÉtê 🦀\n".repeat(3);
        let p = file(&dir, text.as_bytes());
        let c = load_text(&p, TokenizerKind::Char, None, 0.1, 8).unwrap();
        let n = text.chars().count();
        assert_eq!(n, 147);
        // int(0.9 * 147) = 132.
        assert_eq!((c.train.len(), c.val.len()), (132, 15));
        let all: Vec<u32> = c.tokenizer.encode(&text).unwrap();
        assert_eq!(c.train.to_vec(0, 132), all[..132]);
        assert_eq!(c.val.to_vec(0, 15), all[132..]);
        assert_eq!(
            c.tokenizer.decode(&c.val.to_vec(0, 15)).unwrap(),
            text.chars().skip(132).collect::<String>()
        );
        // byte: one token per byte.
        let b = load_text(&p, TokenizerKind::Byte, None, 0.25, 8).unwrap();
        assert_eq!(text.len(), 162);
        assert_eq!((b.train.len(), b.val.len()), (121, 41));
        assert_eq!(b.train.to_vec(0, 2), vec![u32::from(b'T'), u32::from(b'o')]);
        // Resuming encodes with the saved vocabulary.
        let saved = dir.path().join("tokenizer.json");
        c.tokenizer.save(&saved).unwrap();
        let t = Tokenizer::load(&saved).unwrap();
        let r = load_text(&p, TokenizerKind::Char, Some(t), 0.1, 8).unwrap();
        assert_eq!(r.train.to_vec(0, 132), c.train.to_vec(0, 132));
        // val_fraction 0: all tokens train.
        let (tr, va) = split_tokens(&p, all.clone(), 0.0, 8).unwrap();
        assert_eq!((tr.len(), va.len()), (147, 0));
    }

    #[test]
    fn split_sizes_follow_the_floor_rule() {
        assert_eq!(train_len(1_097_573, 0.1), 987_815); // int(0.9 * 1097573)
        assert_eq!(train_len(10, 0.1), 9);
        assert_eq!(train_len(19, 0.5), 9);
        assert_eq!(train_len(7, 0.0), 7);
        assert_eq!(train_len(3, 0.99), 0);
    }

    #[test]
    fn non_utf8_and_empty_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(&dir, b"caf\xc3\xa9 ok\n\xff rest");
        let e = tokenize_file(&p, TokenizerKind::Char).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: not a UTF-8 text file: the byte 0xff at offset 9 is not valid UTF-8; use \
                 tokenizer = \"byte\" to train on its bytes",
                p.display()
            )
        );
        assert_eq!(e.exit_code(), crate::error::EXIT_CONFIG);
        // byte never fails on encoding.
        let (t, ids) = tokenize_file(&p, TokenizerKind::Byte).unwrap();
        assert_eq!((t.vocab_size(), ids.len(), ids[9]), (256, 15, 255));
        // A character cut off by the end of the file.
        let p = file(&dir, "ab\u{1f980}".as_bytes().split_last().unwrap().1);
        assert_eq!(
            tokenize_file(&p, TokenizerKind::Char)
                .unwrap_err()
                .to_string(),
            format!(
                "{}: not a UTF-8 text file: the file ends inside a UTF-8 character that starts at \
                 byte offset 2; use tokenizer = \"byte\" to train on its bytes",
                p.display()
            )
        );
        let p = file(&dir, b"");
        for kind in [TokenizerKind::Char, TokenizerKind::Byte] {
            assert_eq!(
                tokenize_file(&p, kind).unwrap_err().to_string(),
                format!(
                    "{}: the text file is empty; give a file with the text to train on",
                    p.display()
                )
            );
        }
        let missing = tokenize_file(&dir.path().join("none.txt"), TokenizerKind::Char);
        assert!(matches!(missing, Err(Error::Io { .. })));
        // A resumed run's vocabulary lacks a character of the text.
        let p = file(&dir, b"abcz");
        let t = Tokenizer::char_from_text("abc", "run/tokenizer.json");
        assert_eq!(
            encode_file(&p, &t).unwrap_err().to_string(),
            format!(
                "{}: the character 'z' (U+007A) at character 3 is not in the vocabulary of 3 \
                 characters; use only characters of the training text, or tokenizer = \"byte\" \
                 (the vocabulary of run/tokenizer.json)",
                p.display()
            )
        );
    }

    #[test]
    fn too_short_parts_name_the_sizes_and_the_fix() {
        let p = Path::new("input.txt");
        let ids: Vec<u32> = (0..100).collect();
        // 90 / 10 tokens: a block of 9 fits both parts, a block of 10 not the validation part.
        split_tokens(p, ids.clone(), 0.1, 9).unwrap();
        let err = |f: f64, block| {
            split_tokens(p, ids.clone(), f, block)
                .unwrap_err()
                .to_string()
        };
        let part = |name, len, f, fix| {
            format!(
                "input.txt: the {name} part has {len} tokens, fewer than block + 1 = 11 (one \
                 window of block tokens and its next-token targets); the text has 100 tokens \
                 and val_fraction = {f}; use a longer text, {fix} val_fraction or a smaller block"
            )
        };
        assert_eq!(err(0.1, 10), part("validation", 10, 0.1, "a larger"));
        assert_eq!(err(0.9, 10), part("training", 9, 0.9, "a smaller"));
        assert_eq!(err(1.0, 1), "input.txt: val_fraction = 1 is outside [0, 1)");
    }
}
