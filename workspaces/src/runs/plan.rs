//! How long a run trains, as its frozen spec (`spec.toml` in the run folder) says: `train.epochs`,
//! or, for a run counted in optimizer steps (a language model), `train.steps`; either capped by
//! `train.max_steps`; and whether it is a language model's run. Read as written, without
//! validating the spec: a front end shows what it can.

use std::path::Path;

/// A run's planned length; every figure `None` when the spec does not give it (or cannot be
/// read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// `train.epochs` of a run counted in epochs (`None` for a run counted in steps: it has no
    /// epochs to count).
    pub epochs: Option<usize>,
    /// `train.steps` capped by `train.max_steps`: a run counted in steps, whose progress is its
    /// steps done of these.
    pub steps: Option<u64>,
    /// `train.max_steps`.
    pub max_steps: Option<u64>,
    /// The run is a language model's: its data is `text` or `tokens` (or its model `gpt`). Its
    /// figures are loss, perplexity and tokens/s, whether or not it has recorded any yet.
    /// `None` when the spec does not say (no `data.name`) or cannot be read.
    pub language_model: Option<bool>,
}

impl Plan {
    /// The plan of the spec file `spec` (all `None` when it cannot be read or parsed).
    pub fn read(spec: &Path) -> Plan {
        std::fs::read_to_string(spec)
            .map(|text| Plan::of_text(&text))
            .unwrap_or_default()
    }

    /// The plan of a spec's TOML text.
    pub fn of_text(text: &str) -> Plan {
        let Ok(spec) = toml::from_str::<toml::Value>(text) else {
            return Plan::default();
        };
        let name = |section: &str| {
            spec.get(section)
                .and_then(|s| s.get("name"))
                .and_then(toml::Value::as_str)
        };
        let language_model = name("data")
            .map(|data| matches!(data, "text" | "tokens") || name("model") == Some("gpt"));
        let Some(train) = spec.get("train") else {
            return Plan {
                language_model,
                ..Plan::default()
            };
        };
        let int = |key: &str| train.get(key).and_then(toml::Value::as_integer);
        let max_steps = int("max_steps").and_then(|s| u64::try_from(s).ok());
        match int("steps").and_then(|s| u64::try_from(s).ok()) {
            Some(steps) => Plan {
                epochs: None,
                steps: Some(max_steps.map_or(steps, |m| m.min(steps))),
                max_steps,
                language_model,
            },
            None => Plan {
                epochs: int("epochs").and_then(|e| usize::try_from(e).ok()),
                steps: None,
                max_steps,
                language_model,
            },
        }
    }

    /// The most optimizer steps the run takes, when the spec says: the step budget of a run
    /// counted in steps, else `train.max_steps`.
    pub fn step_limit(&self) -> Option<u64> {
        self.steps.or(self.max_steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_counts_epochs_or_steps_as_its_spec_says() {
        let plan = |train: &str| Plan::of_text(&format!("name = 'x'\n[train]\n{train}\n"));
        assert_eq!(
            plan("epochs = 7"),
            Plan {
                epochs: Some(7),
                steps: None,
                max_steps: None,
                language_model: None,
            }
        );
        assert_eq!(plan("epochs = 3\nmax_steps = 9").step_limit(), Some(9));
        let lm = plan("epochs = 1\nsteps = 2000");
        assert_eq!(
            (lm.epochs, lm.steps, lm.step_limit()),
            (None, Some(2000), Some(2000))
        );
        let capped = plan("epochs = 1\nsteps = 2000\nmax_steps = 50");
        assert_eq!((capped.epochs, capped.steps), (None, Some(50)));
        assert_eq!(Plan::of_text("not toml ["), Plan::default());
        // Whether the run is a language model's: its data (or its model) says.
        let kind = |text: &str| Plan::of_text(text).language_model;
        assert_eq!(
            kind("[data]\nname = 'text'\n[model]\nname = 'gpt'"),
            Some(true)
        );
        assert_eq!(
            kind("[data]\nname = 'tokens'\n[model]\nname = 'custom'"),
            Some(true)
        );
        assert_eq!(
            kind("[data]\nname = 'mnist'\n[model]\nname = 'mnist-cnn'"),
            Some(false)
        );
        assert_eq!(
            kind("[data]\nname = 'csv'\n[train]\nepochs = 2"),
            Some(false)
        );
        assert_eq!(
            kind("[model]\nname = 'gpt'"),
            None,
            "no data.name: not said"
        );
        assert_eq!(
            Plan::read(Path::new("/nonexistent/spec.toml")),
            Plan::default()
        );
    }
}
