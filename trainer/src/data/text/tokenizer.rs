//! Tokenizers for language modelling: `char` (a vocabulary of the text's sorted distinct characters,
//! as the PyTorch reference `torch_gpt.py` builds it) and `byte` (the 256 byte values, no vocabulary).
//!
//! The vocabulary is saved in a run folder as `tokenizer.json` (written atomically):
//!
//! ```json
//! {"kind": "char", "vocab_size": 3, "chars": ["\n", " ", "a"]}
//! {"kind": "byte", "vocab_size": 256}
//! ```
//!
//! `chars` lists the characters in id order (id `i` is `chars[i]`, each one Unicode scalar value);
//! `vocab_size` is informative and checked on loading.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use crate::spec::TokenizerKind;

/// The file name of a saved tokenizer in a run folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// `bytes` as text, or an error naming `path`, the byte offset of the first byte that is not
/// UTF-8 (or of a character cut off by the end of the file) and the way out: `tokenizer = "byte"`.
pub fn utf8<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        let what = match e.error_len() {
            Some(_) => format!(
                "the byte 0x{:02x} at offset {at} is not valid UTF-8",
                bytes[at]
            ),
            None => {
                format!("the file ends inside a UTF-8 character that starts at byte offset {at}")
            }
        };
        Error::data(
            path,
            format!(
                "not a UTF-8 text file: {what}; use tokenizer = \"byte\" to train on its bytes"
            ),
        )
    })
}

/// Ids of the characters below this code point are looked up in a table, the rest in a map.
const TABLE: usize = 256;

#[derive(Clone, Debug)]
enum Vocab {
    Char {
        /// Id order.
        chars: Vec<char>,
        /// `table[c]` is the id of `c` plus one (0: not in the vocabulary), for `c < TABLE`.
        table: Box<[u32; TABLE]>,
        /// Ids of the characters from `TABLE` on.
        wide: HashMap<char, u32>,
    },
    Byte,
}

/// A tokenizer: text to ids and back. Its errors name the file it came from ([`Tokenizer::origin`]).
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    origin: PathBuf,
}

impl PartialEq for Tokenizer {
    /// Same kind and, for `char`, the same characters in the same order (the origin is ignored).
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind() && self.chars() == other.chars()
    }
}

/// The JSON form of `tokenizer.json`.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum TokenizerFile {
    Char {
        vocab_size: Option<usize>,
        chars: Vec<String>,
    },
    Byte {
        vocab_size: Option<usize>,
    },
}

impl Tokenizer {
    /// The byte tokenizer (ids 0..256); `origin` names it in errors.
    pub fn byte(origin: impl Into<PathBuf>) -> Self {
        Tokenizer {
            vocab: Vocab::Byte,
            origin: origin.into(),
        }
    }

    /// The `char` tokenizer of `text`: its sorted distinct characters (by code point, as Python's
    /// `sorted(set(text))`). `origin` (the text file) names it in errors.
    pub fn char_from_text(text: &str, origin: impl Into<PathBuf>) -> Self {
        let mut seen = [false; TABLE];
        let mut wide = std::collections::BTreeSet::new();
        for c in text.chars() {
            if (c as usize) < TABLE {
                seen[c as usize] = true;
            } else {
                wide.insert(c);
            }
        }
        let chars: Vec<char> = (0..TABLE as u32)
            .filter(|&i| seen[i as usize])
            .filter_map(char::from_u32)
            .chain(wide)
            .collect();
        Self::from_chars(chars, origin.into())
    }

    /// A `char` tokenizer with `chars` in id order; `None` when a character repeats.
    pub fn from_char_list(chars: Vec<char>, origin: impl Into<PathBuf>) -> Option<Self> {
        let mut sorted = chars.clone();
        sorted.sort_unstable();
        sorted.dedup();
        (sorted.len() == chars.len()).then(|| Self::from_chars(chars, origin.into()))
    }

    fn from_chars(chars: Vec<char>, origin: PathBuf) -> Self {
        let mut table = Box::new([0u32; TABLE]);
        let mut wide = HashMap::new();
        for (id, &c) in chars.iter().enumerate() {
            if (c as usize) < TABLE {
                table[c as usize] = id as u32 + 1;
            } else {
                wide.insert(c, id as u32);
            }
        }
        Tokenizer {
            vocab: Vocab::Char { chars, table, wide },
            origin,
        }
    }

    pub fn kind(&self) -> TokenizerKind {
        match self.vocab {
            Vocab::Char { .. } => TokenizerKind::Char,
            Vocab::Byte => TokenizerKind::Byte,
        }
    }

    /// Number of ids: the distinct characters for `char`, 256 for `byte`.
    pub fn vocab_size(&self) -> usize {
        match &self.vocab {
            Vocab::Char { chars, .. } => chars.len(),
            Vocab::Byte => 256,
        }
    }

    /// The characters in id order (`char`); empty for `byte`.
    pub fn chars(&self) -> &[char] {
        match &self.vocab {
            Vocab::Char { chars, .. } => chars,
            Vocab::Byte => &[],
        }
    }

    /// The file this tokenizer was built from or loaded from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// The id of `c`, if it is in the vocabulary (`byte`: only characters below U+0080, which
    /// are one byte).
    pub fn id_of(&self, c: char) -> Option<u32> {
        match &self.vocab {
            Vocab::Char { table, wide, .. } if (c as usize) < TABLE => {
                table[c as usize].checked_sub(1)
            }
            Vocab::Char { wide, .. } => wide.get(&c).copied(),
            Vocab::Byte => c.is_ascii().then_some(c as u32),
        }
    }

    /// The ids of `text`. For `char`, a character outside the vocabulary is an error naming it
    /// and its character position; `byte` never fails.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len());
        self.encode_into(text, &mut out)?;
        Ok(out)
    }

    /// [`encode`](Self::encode) appending to `out`.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        match &self.vocab {
            Vocab::Byte => out.extend(text.bytes().map(u32::from)),
            Vocab::Char { chars, .. } => {
                out.reserve(text.len());
                for (pos, c) in text.chars().enumerate() {
                    match self.id_of(c) {
                        Some(id) => out.push(id),
                        None => {
                            return Err(Error::data(
                                &self.origin,
                                format!(
                                    "the character {c:?} (U+{:04X}) at character {pos} is not in \
                                     the vocabulary of {} characters; use only characters of the \
                                     training text, or tokenizer = \"byte\"",
                                    u32::from(c),
                                    chars.len()
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Ids of raw bytes: the `byte` tokenizer's encoding of any file. For `char`, the bytes must be
    /// UTF-8 (the error is [`utf8`]'s, naming [`origin`](Self::origin)).
    pub fn encode_bytes(&self, bytes: &[u8]) -> Result<Vec<u32>> {
        match &self.vocab {
            Vocab::Byte => Ok(bytes.iter().map(|&b| u32::from(b)).collect()),
            Vocab::Char { .. } => self.encode(utf8(bytes, &self.origin)?),
        }
    }

    fn out_of_vocab(&self, pos: usize, id: u32) -> Error {
        Error::data(
            &self.origin,
            format!(
                "token {pos} has id {id}, outside the vocabulary of {} ids",
                self.vocab_size()
            ),
        )
    }

    /// The bytes of `ids` (`char`: their characters' UTF-8). An id ≥ the vocabulary size is an
    /// error naming its position.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        match &self.vocab {
            Vocab::Byte => ids
                .iter()
                .enumerate()
                .map(|(pos, &id)| u8::try_from(id).map_err(|_| self.out_of_vocab(pos, id)))
                .collect(),
            Vocab::Char { .. } => Ok(self.decode(ids)?.into_bytes()),
        }
    }

    /// The text of `ids`. An id ≥ the vocabulary size is an error naming its position. For
    /// `byte`, bytes that are not UTF-8 (e.g. a character cut in two) decode as U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.vocab {
            Vocab::Byte => Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned()),
            Vocab::Char { chars, .. } => ids
                .iter()
                .enumerate()
                .map(|(pos, &id)| {
                    chars
                        .get(id as usize)
                        .copied()
                        .ok_or_else(|| self.out_of_vocab(pos, id))
                })
                .collect(),
        }
    }

    /// The `tokenizer.json` text (see the module docs).
    pub fn to_json(&self) -> String {
        let file = match &self.vocab {
            Vocab::Char { chars, .. } => TokenizerFile::Char {
                vocab_size: Some(chars.len()),
                chars: chars.iter().map(|c| c.to_string()).collect(),
            },
            Vocab::Byte => TokenizerFile::Byte {
                vocab_size: Some(256),
            },
        };
        let mut s = serde_json::to_string(&file).expect("a tokenizer serialises");
        s.push('\n');
        s
    }

    /// Parses a `tokenizer.json` text; errors name `origin`.
    pub fn from_json(text: &str, origin: impl Into<PathBuf>) -> Result<Self> {
        let origin = origin.into();
        let bad = |msg: String| Error::data(&origin, msg);
        let file: TokenizerFile = serde_json::from_str(text).map_err(|e| {
            bad(format!(
                "not a tokenizer file ({e}); expected {{\"kind\": \"char\", \"chars\": [...]}} \
                 or {{\"kind\": \"byte\"}}"
            ))
        })?;
        let (tok, declared) = match file {
            TokenizerFile::Byte { vocab_size } => (Tokenizer::byte(origin.clone()), vocab_size),
            TokenizerFile::Char { vocab_size, chars } => {
                let mut list = Vec::with_capacity(chars.len());
                for (id, s) in chars.iter().enumerate() {
                    let mut it = s.chars();
                    match (it.next(), it.next()) {
                        (Some(c), None) => list.push(c),
                        _ => {
                            return Err(bad(format!(
                                "chars[{id}] is {s:?}, not exactly one character"
                            )));
                        }
                    }
                }
                let tok = Tokenizer::from_char_list(list, origin.clone())
                    .ok_or_else(|| bad("a character appears twice in chars".into()))?;
                (tok, vocab_size)
            }
        };
        match declared {
            Some(n) if n != tok.vocab_size() => Err(bad(format!(
                "vocab_size is {n} but the tokenizer has {} ids",
                tok.vocab_size()
            ))),
            _ => Ok(tok),
        }
    }

    /// Writes `tokenizer.json` to `path` atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        // The run folder of a replica started without a launcher may not exist yet.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        crate::fsutil::write_atomic(path, self.to_json().as_bytes()).map_err(|e| Error::io(path, e))
    }

    /// Reads a tokenizer saved by [`save`](Self::save).
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_json(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "First Citizen:\nBefore we proceed — ünïcödé, 日本語 and 🦀!\n";

    #[test]
    fn char_vocabulary_is_the_sorted_distinct_characters() {
        let t = Tokenizer::char_from_text("hello, world\n", "t.txt");
        assert_eq!(
            t.chars(),
            &['\n', ' ', ',', 'd', 'e', 'h', 'l', 'o', 'r', 'w']
        );
        assert_eq!(t.vocab_size(), 10);
        assert_eq!(t.kind(), TokenizerKind::Char);
        assert_eq!(t.encode("hello").unwrap(), vec![5, 4, 6, 6, 7]);
        // Code-point order, as Python's sorted(set(text)), across the table and the wide characters.
        let u = Tokenizer::char_from_text(TEXT, "u.txt");
        let mut want: Vec<char> = TEXT.chars().collect();
        want.sort_unstable();
        want.dedup();
        assert_eq!(u.chars(), want.as_slice());
        assert_eq!(u.id_of('🦀'), Some(want.len() as u32 - 1));
        assert_eq!(u.id_of('\n'), Some(0));
    }

    #[test]
    fn round_trips_unicode_text() {
        let c = Tokenizer::char_from_text(TEXT, "u.txt");
        let ids = c.encode(TEXT).unwrap();
        assert_eq!(ids.len(), TEXT.chars().count());
        assert_eq!(c.decode(&ids).unwrap(), TEXT);
        assert_eq!(c.decode_bytes(&ids).unwrap(), TEXT.as_bytes());
        let b = Tokenizer::byte("u.txt");
        let ids = b.encode(TEXT).unwrap();
        assert_eq!(ids.len(), TEXT.len());
        assert_eq!(&ids[..5], &[70, 105, 114, 115, 116]);
        assert_eq!(b.decode(&ids).unwrap(), TEXT);
        // Any bytes encode with `byte`; a cut character decodes as U+FFFD.
        let raw = [0xffu8, 0x00, 0xe6, 0x97];
        let ids = b.encode_bytes(&raw).unwrap();
        assert_eq!(ids, vec![255, 0, 230, 151]);
        assert_eq!(b.decode_bytes(&ids).unwrap(), raw);
        assert_eq!(b.decode(&ids[2..]).unwrap(), "\u{fffd}");
    }

    #[test]
    fn unknown_characters_and_ids_are_errors() {
        let t = Tokenizer::char_from_text("abc", "corpus.txt");
        assert_eq!(
            t.encode("abé").unwrap_err().to_string(),
            "corpus.txt: the character 'é' (U+00E9) at character 2 is not in the vocabulary of 3 \
             characters; use only characters of the training text, or tokenizer = \"byte\""
        );
        assert_eq!(
            t.decode(&[0, 3]).unwrap_err().to_string(),
            "corpus.txt: token 1 has id 3, outside the vocabulary of 3 ids"
        );
        let b = Tokenizer::byte("run/tokenizer.json");
        assert_eq!(
            b.decode(&[1, 256]).unwrap_err().to_string(),
            "run/tokenizer.json: token 1 has id 256, outside the vocabulary of 256 ids"
        );
        assert_eq!(b.id_of('a'), Some(97));
        assert_eq!(b.id_of('é'), None);
    }

    #[test]
    fn tokenizer_json_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        // Into a run folder not made yet (a replica started without a launcher).
        let path = dir.path().join("run").join(TOKENIZER_FILE);
        let c = Tokenizer::char_from_text(TEXT, "u.txt");
        c.save(&path).unwrap();
        let back = Tokenizer::load(&path).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.origin(), path);
        let ids = c.encode(TEXT).unwrap();
        assert_eq!(back.encode(TEXT).unwrap(), ids);
        assert_eq!(back.decode(&ids).unwrap(), TEXT);

        let small = Tokenizer::char_from_text("ba\n\"", "x");
        assert_eq!(
            small.to_json(),
            "{\"kind\":\"char\",\"vocab_size\":4,\"chars\":[\"\\n\",\"\\\"\",\"a\",\"b\"]}\n"
        );
        let b = Tokenizer::byte("x");
        assert_eq!(b.to_json(), "{\"kind\":\"byte\",\"vocab_size\":256}\n");
        b.save(&path).unwrap();
        assert_eq!(Tokenizer::load(&path).unwrap(), b);
        assert_ne!(Tokenizer::load(&path).unwrap(), c);
        // vocab_size may be left out; the order of `chars` is kept as written.
        let t = Tokenizer::from_json(r#"{"kind":"char","chars":["z","a"]}"#, "t.json").unwrap();
        assert_eq!(t.encode("az").unwrap(), vec![1, 0]);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn bad_tokenizer_files_are_errors() {
        let err = |s: &str| Tokenizer::from_json(s, "t.json").unwrap_err().to_string();
        assert_eq!(
            err(r#"{"kind":"char","chars":["a","bc"]}"#),
            "t.json: chars[1] is \"bc\", not exactly one character"
        );
        assert_eq!(
            err(r#"{"kind":"char","chars":["a","b","a"]}"#),
            "t.json: a character appears twice in chars"
        );
        assert_eq!(
            err(r#"{"kind":"char","vocab_size":3,"chars":["a","b"]}"#),
            "t.json: vocab_size is 3 but the tokenizer has 2 ids"
        );
        assert!(err(r#"{"kind":"bpe"}"#).starts_with("t.json: not a tokenizer file ("));
        let missing = Tokenizer::load(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
        assert!(matches!(missing, Error::Io { .. }));
        assert_eq!(TokenizerKind::parse("byte"), Some(TokenizerKind::Byte));
        assert_eq!(TokenizerKind::parse("bpe"), None);
        assert_eq!(TokenizerKind::Char.to_string(), "char");
    }
}
