//! A sweep file (TOML): the search space, how it is searched, and its scheduler, read and
//! checked at once ([`SweepFile::parse`]); every error names the file and the key.
//!
//! ```toml
//! [search]
//! method = "random"        # or "grid": every combination of the choices
//! trials = 27              # random only
//! seed = 7                 # random only; default 0
//! max_parallel = 2         # default: no limit
//!
//! [search.params]
//! "train.lr" = { loguniform = [1e-4, 1e-1] }
//! "train.batch_size" = { choice = [16, 32, 64] }
//! "train.optimizer" = { choice = ["adam", "sgd"] }
//!
//! [scheduler]              # optional: every trial runs to its end without it
//! name = "asha"
//! metric = "val_loss"      # val_loss, val_accuracy, perplexity
//! mode = "min"             # default: the metric's (accuracy max, the others min)
//! unit = "epochs"          # or "steps"
//! min = 1
//! max = 9
//! eta = 3
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::asha::{Asha, Mode};
use super::space::{Dist, Param, check_key};
use crate::{Error, Result};

/// How the space is searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Every combination of the parameters' choices.
    Grid,
    /// `trials` draws from the distributions.
    Random,
}

/// The metric a scheduler compares trials by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    ValLoss,
    ValAccuracy,
    Perplexity,
}

impl Metric {
    /// Whether smaller or larger is better, unless the file says.
    pub fn mode(self) -> Mode {
        match self {
            Metric::ValAccuracy => Mode::Max,
            Metric::ValLoss | Metric::Perplexity => Mode::Min,
        }
    }
}

/// What a rung's budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Epochs,
    Steps,
}

/// A checked sweep file.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepFile {
    pub method: Method,
    pub params: Vec<Param>,
    /// Random search: how many trials, and the seed they are drawn from.
    pub trials: Option<u32>,
    pub seed: u64,
    pub max_parallel: Option<usize>,
    pub scheduler: Option<Scheduler>,
}

/// ASHA with the metric it compares and the unit of its budgets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scheduler {
    pub asha: Asha,
    pub metric: Metric,
    pub unit: Unit,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    search: RawSearch,
    scheduler: Option<RawScheduler>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearch {
    method: Method,
    trials: Option<u32>,
    seed: Option<u64>,
    max_parallel: Option<usize>,
    params: BTreeMap<String, RawDist>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
enum RawDist {
    Choice(Vec<toml::Value>),
    Uniform([f64; 2]),
    LogUniform([f64; 2]),
    Int([i64; 2]),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    name: String,
    metric: Metric,
    mode: Option<String>,
    unit: Unit,
    min: u64,
    max: u64,
    eta: Option<u64>,
}

impl SweepFile {
    /// Reads and checks the sweep file `text` (from `path`, for messages): the TOML, every
    /// key a spec key, every distribution's bounds, `trials` for a random search and only
    /// choices for a grid, the scheduler's settings.
    pub fn parse(text: &str, path: &Path) -> Result<SweepFile> {
        let file = path.display();
        let invalid = |msg: String| Error::Invalid(format!("{file}: {msg}"));
        let raw: Raw = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut params = Vec::with_capacity(raw.search.params.len());
        for (key, dist) in raw.search.params {
            let at = |msg: String| invalid(format!("search.params.\"{key}\": {msg}"));
            check_key(&key).map_err(at)?;
            let dist = match dist {
                RawDist::Choice(values) => Dist::Choice(values.iter().map(choice_value).collect()),
                RawDist::Uniform([a, b]) => Dist::Uniform(a, b),
                RawDist::LogUniform([a, b]) => Dist::LogUniform(a, b),
                RawDist::Int([a, b]) => Dist::Int(a, b),
            };
            if raw.search.method == Method::Grid && !matches!(dist, Dist::Choice(_)) {
                return Err(at(
                    "a grid takes choices only ({ choice = [...] }); use method = \"random\" \
                     to draw from a range"
                        .into(),
                ));
            }
            let param = Param {
                key: key.clone(),
                dist,
            };
            param.check().map_err(at)?;
            params.push(param);
        }
        if params.is_empty() {
            return Err(invalid(
                "search.params is empty: name at least one spec key".into(),
            ));
        }
        let trials = match (raw.search.method, raw.search.trials) {
            (Method::Random, None | Some(0)) => {
                return Err(invalid(
                    "search.trials: a random search needs a number of trials (at least 1)".into(),
                ));
            }
            (Method::Grid, Some(_)) => {
                return Err(invalid(
                    "search.trials: a grid runs every combination; remove trials or use \
                     method = \"random\""
                        .into(),
                ));
            }
            (_, t) => t,
        };
        if raw.search.max_parallel == Some(0) {
            return Err(invalid("search.max_parallel must be at least 1".into()));
        }
        let scheduler = raw
            .scheduler
            .map(|s| scheduler(s).map_err(|m| invalid(format!("scheduler.{m}"))))
            .transpose()?;
        Ok(SweepFile {
            method: raw.search.method,
            params,
            trials,
            seed: raw.search.seed.unwrap_or(0),
            max_parallel: raw.search.max_parallel,
            scheduler,
        })
    }
}

/// A choice as a `--set` value: its TOML (strings quoted, numbers as written).
fn choice_value(v: &toml::Value) -> String {
    v.to_string()
}

/// The checked scheduler, or `KEY: why`.
fn scheduler(s: RawScheduler) -> std::result::Result<Scheduler, String> {
    if s.name != "asha" {
        return Err(format!(
            "name: no scheduler `{}` (asha is the one there is)",
            s.name
        ));
    }
    let mode = match s.mode.as_deref() {
        None => s.metric.mode(),
        Some("min") => Mode::Min,
        Some("max") => Mode::Max,
        Some(other) => return Err(format!("mode: `{other}` is neither min nor max")),
    };
    let asha = Asha::new(s.min, s.max, s.eta.unwrap_or(3), mode)
        .map_err(|e| format!("min/max/eta: {e}"))?;
    Ok(Scheduler {
        asha,
        metric: s.metric,
        unit: s.unit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[search]
method = "random"
trials = 27
seed = 7
max_parallel = 2

[search.params]
"train.lr" = { loguniform = [1e-4, 1e-1] }
"train.batch_size" = { choice = [16, 32, 64] }
"train.optimizer" = { choice = ["adam", "sgd"] }

[scheduler]
name = "asha"
metric = "val_loss"
unit = "epochs"
min = 1
max = 9
"#;

    fn parse(text: &str) -> Result<SweepFile> {
        SweepFile::parse(text, Path::new("sweep.toml"))
    }

    #[test]
    fn the_issue_s_search_reads_back() {
        let f = parse(FILE).unwrap();
        assert_eq!(
            (f.method, f.trials, f.seed, f.max_parallel),
            (Method::Random, Some(27), 7, Some(2))
        );
        let keys: Vec<&str> = f.params.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["train.batch_size", "train.lr", "train.optimizer"]);
        assert_eq!(
            f.params[2].dist,
            Dist::Choice(vec!["\"adam\"".into(), "\"sgd\"".into()])
        );
        let s = f.scheduler.unwrap();
        assert_eq!(s.asha.rungs(), [1, 3, 9]);
        assert_eq!(
            (s.asha.mode, s.metric, s.unit),
            (Mode::Min, Metric::ValLoss, Unit::Epochs)
        );
    }

    #[test]
    fn mistakes_are_named_with_the_file_and_key() {
        let cases = [
            (
                FILE.replace("\"train.lr\"", "\"train.lrr\""),
                "sweep.toml: search.params.\"train.lrr\": no such spec key `train.lrr`; did you mean `train.lr`?",
            ),
            (
                FILE.replace("[1e-4, 1e-1]", "[1e-1, 1e-4]"),
                "search.params.\"train.lr\": the bounds",
            ),
            (
                FILE.replace("trials = 27\n", ""),
                "search.trials: a random search needs a number of trials",
            ),
            (
                FILE.replace("\"random\"", "\"grid\""),
                "a grid takes choices only",
            ),
            (
                FILE.replace("max_parallel = 2", "max_parallel = 0"),
                "search.max_parallel must be at least 1",
            ),
            (
                FILE.replace("name = \"asha\"", "name = \"hyperband\""),
                "scheduler.name: no scheduler `hyperband`",
            ),
            (
                FILE.replace("max = 9", "max = 9\nmode = \"up\""),
                "scheduler.mode: `up` is neither min nor max",
            ),
            (
                FILE.replace("min = 1", "min = 10"),
                "scheduler.min/max/eta: ASHA's budgets need 1 <= min <= max",
            ),
            (
                FILE.replace("metric = \"val_loss\"", "metric = \"loss\""),
                "unknown variant `loss`",
            ),
            (FILE.replace("seed = 7", "sed = 7"), "unknown field `sed`"),
        ];
        for (text, want) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("sweep.toml"), "{want}\n{e}");
        }
    }

    #[test]
    fn a_grid_has_choices_and_no_trial_count() {
        let grid = r#"
[search]
method = "grid"
[search.params]
"train.lr" = { choice = [0.001, 0.01] }
"#;
        let f = parse(grid).unwrap();
        assert_eq!(
            (f.method, f.trials, f.scheduler),
            (Method::Grid, None, None)
        );
        let e = parse(&grid.replace("method = \"grid\"", "method = \"grid\"\ntrials = 3"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a grid runs every combination"), "{e}");
        // Accuracy is better when larger, unless the file says otherwise.
        let acc = FILE.replace("val_loss", "val_accuracy");
        assert_eq!(parse(&acc).unwrap().scheduler.unwrap().asha.mode, Mode::Max);
    }
}
