//! Search spaces: the parameters a sweep explores, each a spec key with a distribution, and the
//! sampling of trials from them. Pure: a trial's values are a function of the sweep's seed, the
//! trial's number and the parameter's key alone, so a sweep picked up after its process died
//! draws the same trials again, and adding a trial never changes the others.
//!
//! On the command line a parameter is `KEY=KIND:ARGS` ([`Param::from_str`]):
//!
//! | kind | example | values |
//! | --- | --- | --- |
//! | `choice` | `train.batch_size=choice:16,32,64` | one of the listed values, equally likely |
//! | `uniform` | `train.momentum=uniform:0.8:0.99` | a float in `[low, high)` |
//! | `loguniform` | `train.lr=loguniform:1e-4:1e-1` | a float whose logarithm is uniform |
//! | `int` | `model.hidden=int:64:512` | an integer in `[low, high]`, inclusive |
//!
//! A sweep file's `[search.params]` table says the same in TOML (`"train.lr" = { loguniform =
//! [1e-4, 1e-1] }`, `"train.optimizer" = { choice = ["adam", "sgd"] }`).

use std::str::FromStr;

use ddp_trainer::data::rng::SplitMix64;
use ddp_trainer::spec::KEYS;
use serde::{Deserialize, Serialize};

use crate::runs::workspace::nearest;
use crate::{Error, Result};

/// How a parameter's values are drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Dist {
    /// One of these values (each as a `--set` value: TOML, or a bare word as a string).
    Choice(Vec<String>),
    Uniform(f64, f64),
    LogUniform(f64, f64),
    Int(i64, i64),
}

/// One parameter of a search space: a spec key and its distribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Param {
    pub key: String,
    pub dist: Dist,
}

const USAGE: &str = "expected KEY=KIND:ARGS with KIND one of choice:V1,V2,..., uniform:LOW:HIGH, \
                     loguniform:LOW:HIGH, int:LOW:HIGH (e.g. train.lr=loguniform:1e-4:1e-1)";

impl FromStr for Param {
    type Err = Error;

    /// Parses `KEY=KIND:ARGS`; the key must be a spec key (a near one is suggested), the
    /// bounds ordered (`low < high`; positive for `loguniform`), the choices distinct.
    fn from_str(s: &str) -> Result<Param> {
        let invalid = |msg: String| Error::Invalid(format!("--param {s}: {msg}"));
        let (key, rest) = s
            .split_once('=')
            .ok_or_else(|| invalid(format!("no distribution ({USAGE})")))?;
        let key = key.trim();
        check_key(key).map_err(invalid)?;
        let (kind, args) = rest
            .split_once(':')
            .ok_or_else(|| invalid(format!("no kind ({USAGE})")))?;
        let bounds = || -> std::result::Result<(f64, f64), String> {
            let (a, b) = args
                .split_once(':')
                .ok_or_else(|| format!("{kind} needs LOW:HIGH ({USAGE})"))?;
            let num = |v: &str| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|_| format!("`{v}` is not a number"))
            };
            Ok((num(a)?, num(b)?))
        };
        let dist = match kind.trim() {
            "choice" => Dist::Choice(args.split(',').map(|v| v.trim().to_string()).collect()),
            "uniform" => bounds()
                .map(|(a, b)| Dist::Uniform(a, b))
                .map_err(invalid)?,
            "loguniform" => bounds()
                .map(|(a, b)| Dist::LogUniform(a, b))
                .map_err(invalid)?,
            "int" => {
                let (a, b) = bounds().map_err(invalid)?;
                if a.fract() != 0.0 || b.fract() != 0.0 {
                    return Err(invalid("int needs whole bounds".into()));
                }
                Dist::Int(a as i64, b as i64)
            }
            other => {
                return Err(invalid(format!("no such kind `{other}` ({USAGE})")));
            }
        };
        let param = Param {
            key: key.to_string(),
            dist,
        };
        param.check().map_err(invalid)?;
        Ok(param)
    }
}

/// A spec key, or why not (with the nearest keys).
pub(crate) fn check_key(key: &str) -> std::result::Result<(), String> {
    if KEYS.contains(&key) {
        return Ok(());
    }
    let hint = match nearest(key, KEYS).first() {
        Some(k) => format!("; did you mean `{k}`?"),
        None => " (docs/spec.md lists the keys)".to_string(),
    };
    Err(format!("no such spec key `{key}`{hint}"))
}

impl Param {
    /// The distribution's own checks: ordered finite bounds (positive for `loguniform`),
    /// non-empty distinct choices.
    pub fn check(&self) -> std::result::Result<(), String> {
        let ordered = |a: f64, b: f64| {
            if a.is_finite() && b.is_finite() && a < b {
                Ok(())
            } else {
                Err(format!(
                    "the bounds {a} and {b} must be finite with LOW < HIGH"
                ))
            }
        };
        match &self.dist {
            Dist::Choice(values) => {
                if values.iter().any(String::is_empty) {
                    return Err("a choice is empty".into());
                }
                for (i, v) in values.iter().enumerate() {
                    if values[..i].contains(v) {
                        return Err(format!("the choice `{v}` is given twice"));
                    }
                }
                Ok(())
            }
            Dist::Uniform(a, b) => ordered(*a, *b),
            Dist::LogUniform(a, b) if *a <= 0.0 => {
                Err(format!("loguniform needs positive bounds; got {a} and {b}"))
            }
            Dist::LogUniform(a, b) => ordered(*a, *b),
            Dist::Int(a, b) if a > b => Err(format!("int needs LOW <= HIGH; got {a} and {b}")),
            Dist::Int(..) => Ok(()),
        }
    }

    /// This parameter's value for `trial` of a sweep seeded `seed`, as a `--set` value.
    pub fn sample(&self, seed: u64, trial: u32) -> String {
        let mut rng = SplitMix64::keyed(&[seed, trial as u64, fnv1a(&self.key)]);
        match &self.dist {
            Dist::Choice(values) => values[rng.below(values.len() as u64) as usize].clone(),
            Dist::Uniform(a, b) => float(a + (b - a) * rng.next_f64()),
            Dist::LogUniform(a, b) => {
                let (la, lb) = (a.ln(), b.ln());
                float((la + (lb - la) * rng.next_f64()).exp())
            }
            Dist::Int(a, b) => (a + rng.below((b - a) as u64 + 1) as i64).to_string(),
        }
    }
}

/// A float as a TOML literal that reads back as a float, shortest first (`0.001`, `2.0`).
fn float(x: f64) -> String {
    let s = format!("{x}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// FNV-1a of a key: the parameter's part of its stream's key.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Trial `trial`'s overrides (`key=value`, in the parameters' order) of a sweep seeded `seed`.
/// Refuses a key given twice.
pub fn trial_overrides(params: &[Param], seed: u64, trial: u32) -> Result<Vec<String>> {
    for (i, p) in params.iter().enumerate() {
        if params[..i].iter().any(|q| q.key == p.key) {
            return Err(Error::Invalid(format!(
                "the parameter {} is given twice: give it one distribution",
                p.key
            )));
        }
    }
    Ok(params
        .iter()
        .map(|p| format!("{}={}", p.key, p.sample(seed, trial)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(s: &str) -> Param {
        s.parse().unwrap()
    }

    fn error(s: &str) -> String {
        s.parse::<Param>().unwrap_err().to_string()
    }

    #[test]
    fn parameters_parse_from_the_command_line() {
        assert_eq!(
            param("train.lr=loguniform:1e-4:1e-1").dist,
            Dist::LogUniform(1e-4, 0.1)
        );
        assert_eq!(
            param("train.batch_size=choice:16, 32,64").dist,
            Dist::Choice(vec!["16".into(), "32".into(), "64".into()])
        );
        assert_eq!(
            param("train.momentum=uniform:0.8:0.99").dist,
            Dist::Uniform(0.8, 0.99)
        );
        assert_eq!(param("train.epochs=int:1:9").dist, Dist::Int(1, 9));
    }

    #[test]
    fn bad_parameters_are_refused_naming_what_is_wrong() {
        let cases = [
            (
                "train.lrr=uniform:0:1",
                "no such spec key `train.lrr`; did you mean `train.lr`?",
            ),
            ("train.lr", "no distribution"),
            ("train.lr=0.1", "no kind"),
            ("train.lr=normal:0:1", "no such kind `normal`"),
            ("train.lr=uniform:1", "uniform needs LOW:HIGH"),
            ("train.lr=uniform:a:1", "`a` is not a number"),
            ("train.lr=uniform:1:0", "must be finite with LOW < HIGH"),
            (
                "train.lr=loguniform:0:1",
                "loguniform needs positive bounds",
            ),
            ("train.epochs=int:1.5:3", "int needs whole bounds"),
            ("train.epochs=int:3:1", "int needs LOW <= HIGH"),
            (
                "train.optimizer=choice:adam,adam",
                "the choice `adam` is given twice",
            ),
            ("train.optimizer=choice:adam,", "a choice is empty"),
        ];
        for (input, want) in cases {
            let e = error(input);
            assert!(e.contains(want) && e.starts_with("--param"), "{input}: {e}");
        }
    }

    #[test]
    fn samples_stay_in_their_ranges_and_cover_them() {
        let lr = param("train.lr=loguniform:1e-4:1e-1");
        let bs = param("train.batch_size=choice:16,32,64");
        let ep = param("train.epochs=int:1:3");
        let mut decades = [0; 3];
        let mut sizes = std::collections::BTreeSet::new();
        let mut epochs = std::collections::BTreeSet::new();
        for t in 0..300 {
            let v: f64 = lr.sample(7, t).parse().unwrap();
            assert!((1e-4..1e-1).contains(&v), "{v}");
            decades[(v.log10() + 4.0).floor() as usize] += 1;
            sizes.insert(bs.sample(7, t));
            epochs.insert(ep.sample(7, t));
        }
        // Log-uniform: about a third in each decade.
        assert!(
            decades.iter().all(|&n| (70..130).contains(&n)),
            "{decades:?}"
        );
        assert_eq!(sizes.len(), 3);
        assert_eq!(epochs, ["1", "2", "3"].map(String::from).into());
    }

    #[test]
    fn a_trial_is_a_function_of_the_seed_its_number_and_the_key() {
        let params = vec![
            param("train.lr=loguniform:1e-4:1e-1"),
            param("train.optimizer=choice:adam,sgd"),
        ];
        let t5 = trial_overrides(&params, 7, 5).unwrap();
        assert_eq!(t5, trial_overrides(&params, 7, 5).unwrap());
        assert_ne!(t5, trial_overrides(&params, 8, 5).unwrap());
        assert_ne!(t5, trial_overrides(&params, 7, 6).unwrap());
        // Another parameter added does not change this one's values.
        let more = [params.clone(), vec![param("train.epochs=int:1:9")]].concat();
        assert_eq!(trial_overrides(&more, 7, 5).unwrap()[..2], t5[..]);
        assert!(t5[0].starts_with("train.lr=0.") || t5[0].contains('e'));
        let twice = [params.clone(), vec![param("train.lr=uniform:0.1:0.2")]].concat();
        let e = trial_overrides(&twice, 7, 0).unwrap_err().to_string();
        assert!(e.contains("train.lr is given twice"), "{e}");
    }

    #[test]
    fn floats_read_back_as_floats() {
        assert_eq!(float(2.0), "2.0");
        assert_eq!(float(0.001), "0.001");
        assert_eq!(float(1e-20), "0.00000000000000000001");
    }
}
