//! The spec rules of language models (`gpt` on `text` or `tokens` data) and the GPT's shape
//! from `[model]`.

use super::{DataName, ModelName, Spec};
use crate::Result;

/// The `gpt` keys of `[model]`, for messages.
const GPT_KEYS: [&str; 5] = ["layers", "heads", "embd", "block", "dropout"];

impl Spec {
    /// The rules of language models: `gpt` takes token data and token data takes `gpt` (or a
    /// custom model), a step budget, and keys that belong to their data or model only.
    pub(super) fn check_language_model(&self) -> Result<()> {
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        let (model, data) = (self.model.name, self.data.name);
        if model == ModelName::Gpt && !data.is_text() {
            return bad(
                "data.name",
                format!(
                    "model \"gpt\" is a language model: it trains on data.name = \"text\" or \"tokens\", not {:?}",
                    data_label(data)
                ),
            );
        }
        if data.is_text() && !matches!(model, ModelName::Gpt | ModelName::Custom) {
            return bad(
                "model.name",
                format!(
                    "data.name = {:?} is a token stream for a language model: use model.name = \"gpt\" (or a custom model taking token ids)",
                    data_label(data)
                ),
            );
        }
        if model != ModelName::Gpt {
            let m = &self.model;
            // A custom language model reads windows of `model.block` tokens.
            let custom_lm = model == ModelName::Custom && data.is_text();
            let set = [
                m.layers.is_some(),
                m.heads.is_some(),
                m.embd.is_some(),
                m.block.is_some() && !custom_lm,
                m.dropout.is_some(),
            ];
            if let Some(i) = set.iter().position(|&s| s) {
                let key = format!("model.{}", GPT_KEYS[i]);
                let only = if GPT_KEYS[i] == "block" {
                    "applies to language models only (model.name = \"gpt\", or \"custom\" on text or token data)"
                } else {
                    "applies to model.name = \"gpt\" only"
                };
                return bad(&key, format!("{only}: remove it"));
            }
            if custom_lm && m.block == Some(0) {
                return bad("model.block", "must be at least 1".into());
            }
        }
        if model == ModelName::Gpt {
            let heads = self.model.heads.unwrap_or(4);
            let embd = self.model.embd.unwrap_or(128);
            for (key, v) in [
                ("model.layers", self.model.layers),
                ("model.heads", self.model.heads),
                ("model.embd", self.model.embd),
                ("model.block", self.model.block),
            ] {
                if v == Some(0) {
                    return bad(key, "must be at least 1".into());
                }
            }
            if !embd.is_multiple_of(heads) {
                return bad(
                    "model.heads",
                    format!(
                        "{heads} heads do not divide embd = {embd}: pick heads that divide embd"
                    ),
                );
            }
            if let Some(p) = self.model.dropout
                && !(0.0..1.0).contains(&p)
            {
                return bad("model.dropout", format!("must be in [0, 1), got {p}"));
            }
        }
        if data.is_text() && self.train.steps.is_none() {
            return bad(
                "train.steps",
                format!(
                    "is required for data.name = {:?}: a language model trains for a number of optimizer steps (e.g. train.steps = 2000), not epochs",
                    data_label(data)
                ),
            );
        }
        for (key, v) in [
            ("train.eval_every", self.train.eval_every),
            ("checkpoint.every_steps", self.checkpoint.every_steps),
        ] {
            if v == Some(0) {
                return bad(key, "must be at least 1 step".into());
            }
        }
        if self.data.tokenizer.is_some() && data != DataName::Text {
            return bad(
                "data.tokenizer",
                "applies to data.name = \"text\" only: remove it".into(),
            );
        }
        if data != DataName::Tokens {
            if self.data.dtype.is_some() {
                return bad(
                    "data.dtype",
                    "applies to data.name = \"tokens\" only: remove it".into(),
                );
            }
            if self.data.vocab_size.is_some() {
                return bad(
                    "data.vocab_size",
                    "applies to data.name = \"tokens\" only (a text's vocabulary comes from its tokenizer): remove it".into(),
                );
            }
        } else if self.data.vocab_size.is_none_or(|v| v == 0) {
            return bad(
                "data.vocab_size",
                "is required for data.name = \"tokens\": the number of distinct ids (every id in train.bin and val.bin is below it), e.g. 50304".into(),
            );
        }
        Ok(())
    }
}

/// A data name as the spec spells it.
fn data_label(d: DataName) -> String {
    toml::Value::try_from(d)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{d:?}"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::Spec;

    const GPT: &str = r#"
name = "g"
[model]
name = "gpt"
[data]
name = "text"
path = "input.txt"
[train]
steps = 100
"#;

    fn check(text: &str, overrides: &[&str]) -> Result<Spec, String> {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Spec::parse(text, Path::new("g.toml"), &o).map_err(|e| e.to_string())
    }

    #[test]
    fn a_custom_language_model_takes_model_block_and_only_it() {
        let custom = GPT.replace("name = \"gpt\"", "name = \"custom\"");
        let s = check(&custom, &["model.block=32"]).unwrap();
        assert_eq!(crate::models::gpt::GptConfig::from_spec(&s, 79).block, 32);
        assert_eq!(
            check(&custom, &["model.embd=32"]).unwrap_err(),
            "g.toml: model.embd: applies to model.name = \"gpt\" only: remove it"
        );
        let image = custom
            .replace("name = \"text\"", "name = \"mnist\"")
            .replace("steps = 100", "epochs = 1");
        assert_eq!(
            check(&image, &["model.block=32"]).unwrap_err(),
            "g.toml: model.block: applies to language models only (model.name = \"gpt\", or \"custom\" on text or token data): remove it"
        );
    }

    #[test]
    fn a_gpt_spec_takes_the_baby_gpt_shape_unless_told() {
        let s = check(GPT, &[]).unwrap();
        let c = crate::models::gpt::GptConfig::from_spec(&s, 65);
        assert_eq!(
            (c.vocab, c.block, c.layers, c.heads, c.embd),
            (65, 64, 4, 4, 128)
        );
        assert_eq!(c.dropout, 0.0);
        let s = check(
            GPT,
            &[
                "model.layers=2",
                "model.block=32",
                "model.embd=64",
                "model.heads=2",
            ],
        )
        .unwrap();
        let c = crate::models::gpt::GptConfig::from_spec(&s, 65);
        assert_eq!((c.block, c.layers, c.heads, c.embd), (32, 2, 2, 64));
    }

    #[test]
    fn language_model_rules_name_the_key_and_the_way_out() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["data.name=\"mnist\""],
                "data.name: model \"gpt\" is a language model: it trains on data.name = \"text\" or \"tokens\", not \"mnist\"",
            ),
            (
                &["model.name=\"mnist-cnn\""],
                "model.name: data.name = \"text\" is a token stream for a language model",
            ),
            (
                &["model.heads=3"],
                "model.heads: 3 heads do not divide embd = 128",
            ),
            (&["model.block=0"], "model.block: must be at least 1"),
            (&["model.dropout=1.0"], "model.dropout: must be in [0, 1)"),
            (
                &["train.eval_every=0"],
                "train.eval_every: must be at least 1 step",
            ),
            (
                &["data.dtype=\"u32\""],
                "data.dtype: applies to data.name = \"tokens\" only",
            ),
            (
                &["data.name=\"tokens\""],
                "data.vocab_size: is required for data.name = \"tokens\"",
            ),
        ];
        for (overrides, want) in cases {
            let err = check(GPT, overrides).unwrap_err();
            assert!(err.contains(want), "{overrides:?}: {err}");
            assert!(
                err.contains("g.toml"),
                "{overrides:?}: names the file: {err}"
            );
        }
        let no_steps = GPT.replace("steps = 100", "epochs = 2");
        let err = check(&no_steps, &[]).unwrap_err();
        assert!(
            err.contains("train.steps: is required for data.name = \"text\""),
            "{err}"
        );
        let image = GPT
            .replace("name = \"gpt\"", "name = \"mlp\"")
            .replace("name = \"text\"", "name = \"mnist\"");
        let err = check(&image, &["model.layers=2"]).unwrap_err();
        assert!(
            err.contains("model.layers: applies to model.name = \"gpt\" only"),
            "{err}"
        );
        let err = check(&image, &["data.tokenizer=\"byte\""]).unwrap_err();
        assert!(
            err.contains("data.tokenizer: applies to data.name = \"text\" only"),
            "{err}"
        );
    }

    #[test]
    fn token_files_take_a_dtype_and_a_vocabulary() {
        let s = check(
            GPT,
            &[
                "data.name=\"tokens\"",
                "data.vocab_size=50304",
                "data.dtype=\"u32\"",
            ],
        )
        .unwrap();
        assert_eq!(s.data.vocab_size, Some(50304));
        assert_eq!(s.data.dtype, Some(crate::spec::TokenDtype::U32));
    }

    #[test]
    fn existing_specs_keep_their_frozen_form_and_hash() {
        let image = GPT
            .replace("name = \"gpt\"", "name = \"mlp\"")
            .replace("name = \"text\"", "name = \"mnist\"")
            .replace("steps = 100", "epochs = 2");
        let s = check(&image, &[]).unwrap();
        let toml = s.to_toml();
        for key in [
            "layers",
            "tokenizer",
            "vocab_size",
            "steps",
            "eval_every",
            "every_steps",
        ] {
            assert!(
                !toml.contains(key),
                "{key} written for a spec without it:\n{toml}"
            );
        }
    }
}
