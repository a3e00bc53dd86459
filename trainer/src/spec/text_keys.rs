//! The words of a language model's data keys: which tokenizer a text is encoded with
//! (`data.tokenizer`) and the id type of token files (`data.dtype`). Defined with the spec, and
//! used by the tokenizers and token files of `crate::data::text`.

/// Which tokenizer a text is encoded with (`data.tokenizer`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    #[default]
    /// One id per Unicode character; the vocabulary is the text's sorted distinct characters.
    Char,
    /// One id per byte (0..256); any file encodes.
    Byte,
}

impl TokenizerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenizerKind::Char => "char",
            TokenizerKind::Byte => "byte",
        }
    }

    /// `"char"` or `"byte"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "char" => Some(TokenizerKind::Char),
            "byte" => Some(TokenizerKind::Byte),
            _ => None,
        }
    }
}

impl std::fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The id type of a token file (`data.dtype`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TokenDtype {
    /// Little-endian `u16`: vocabularies up to 65,536 ids.
    #[default]
    U16,
    /// Little-endian `u32`.
    U32,
}

impl TokenDtype {
    /// Bytes per id.
    pub fn size(self) -> usize {
        match self {
            TokenDtype::U16 => 2,
            TokenDtype::U32 => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenDtype::U16 => "u16",
            TokenDtype::U32 => "u32",
        }
    }

    /// `"u16"` or `"u32"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "u16" => Some(TokenDtype::U16),
            "u32" => Some(TokenDtype::U32),
            _ => None,
        }
    }

    /// The number of distinct ids the type holds.
    pub fn ids(self) -> u64 {
        1u64 << (8 * self.size())
    }
}

impl std::fmt::Display for TokenDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
