//! How long a run trains, as its frozen spec (`spec.toml` in the run folder) says: `train.epochs`,
//! or, for a run counted in optimizer steps (a language model), `train.steps`; either capped by
//! `train.max_steps`. Read as written, without validating the spec: a front end shows what it can.

use std::path::Path;

/// A run's planned length; every figure `None` when the spec does not give it (or cannot be
/// read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// `train.epochs` of a run counted in epochs (`None` for a run counted in steps: it has no
    /// epochs to count).
    pub epochs: Option<usize>,
    /// `train.steps` capped by `train.max_steps`: a run counted in steps, whose progress is its
    /// steps done of these.
    pub steps: Option<u64>,
    /// `train.max_steps`.
    pub max_steps: Option<u64>,
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
        let Some(train) = toml::from_str::<toml::Value>(text)
            .ok()
            .and_then(|v| v.get("train").cloned())
        else {
            return Plan::default();
        };
        let int = |key: &str| train.get(key).and_then(toml::Value::as_integer);
        let max_steps = int("max_steps").and_then(|s| u64::try_from(s).ok());
        match int("steps").and_then(|s| u64::try_from(s).ok()) {
            Some(steps) => Plan {
                epochs: None,
                steps: Some(max_steps.map_or(steps, |m| m.min(steps))),
                max_steps,
            },
            None => Plan {
                epochs: int("epochs").and_then(|e| usize::try_from(e).ok()),
                steps: None,
                max_steps,
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
                max_steps: None
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
        assert_eq!(
            Plan::read(Path::new("/nonexistent/spec.toml")),
            Plan::default()
        );
    }
}
