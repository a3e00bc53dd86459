//! Grids: `--grid KEY=V1,V2,...` axes, their cartesian product, and the short labels
//! (`lr=0.01,batch_size=64`) runs of a sweep are named by. Pure.

use std::collections::BTreeSet;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::space;
use crate::{Error, Result};

/// The most runs one sweep may create.
pub const MAX_RUNS: usize = 1000;

/// One `--grid KEY=V1,V2,...`: a spec key and the values it takes, as given (each one is read
/// like a `--set` value: TOML, or a bare word as a string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridAxis {
    pub key: String,
    pub values: Vec<String>,
}

const GRID_USAGE: &str = "expected KEY=V1,V2,..., e.g. --grid train.lr=0.001,0.01";

impl FromStr for GridAxis {
    type Err = Error;

    /// Parses `KEY=V1,V2,...`. Values are split at commas outside brackets, braces and quotes, so
    /// `--grid 'ddp.devices=[0,1],[2,3]'` has two values. The key must be a spec key
    /// (`ddp_trainer::spec::KEYS`); values must be non-empty and distinct.
    fn from_str(s: &str) -> Result<GridAxis> {
        let invalid = |msg: String| Error::Invalid(format!("--grid {s}: {msg}"));
        let Some((key, raw)) = s.split_once('=') else {
            return Err(invalid(format!("no values ({GRID_USAGE})")));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(invalid(format!("empty key ({GRID_USAGE})")));
        }
        space::check_key(key).map_err(invalid)?;
        if raw.trim().is_empty() {
            return Err(invalid(format!("no values ({GRID_USAGE})")));
        }
        let values = split_values(raw).map_err(invalid)?;
        let mut seen = BTreeSet::new();
        for (i, v) in values.iter().enumerate() {
            if v.is_empty() {
                return Err(invalid(format!("value {} is empty", i + 1)));
            }
            if !seen.insert(v.as_str()) {
                return Err(invalid(format!("value `{v}` is given twice")));
            }
        }
        Ok(GridAxis {
            key: key.to_string(),
            values,
        })
    }
}

/// Splits `raw` at the commas that are outside `[...]`, `{...}` and quotes; trims each value.
fn split_values(raw: &str) -> std::result::Result<Vec<String>, String> {
    let mut values = Vec::new();
    let mut cur = String::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    for c in raw.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                values.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if quote.is_some() {
        return Err("unclosed quote".into());
    }
    if depth != 0 {
        return Err("unbalanced brackets".into());
    }
    values.push(cur.trim().to_string());
    Ok(values)
}

/// One point of the grid: its overrides (`key=value`, in grid order) and a short label
/// (`lr=0.01,batch_size=64`) for run names, legends and progress lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Combination {
    pub overrides: Vec<String>,
    pub label: String,
}

/// The cartesian product of `axes`, the first axis varying slowest (like nested loops in the
/// order the `--grid` options were given). Refuses no axes, a key given twice and more than
/// [`MAX_RUNS`] combinations.
pub fn combinations(axes: &[GridAxis]) -> Result<Vec<Combination>> {
    if axes.is_empty() {
        return Err(Error::Invalid(format!(
            "a sweep needs at least one --grid ({GRID_USAGE})"
        )));
    }
    let mut keys = BTreeSet::new();
    for a in axes {
        if !keys.insert(a.key.as_str()) {
            return Err(Error::Invalid(format!(
                "--grid {} is given twice: put all its values in one --grid",
                a.key
            )));
        }
    }
    let total = axes
        .iter()
        .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
        .filter(|&n| n <= MAX_RUNS)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "the grid has {} combinations: a sweep may have at most {MAX_RUNS}",
                axes.iter()
                    .map(|a| a.values.len().to_string())
                    .collect::<Vec<_>>()
                    .join(" x ")
            ))
        })?;
    let short = short_keys(&axes.iter().map(|a| a.key.as_str()).collect::<Vec<_>>());
    let mut out = Vec::with_capacity(total);
    for mut i in 0..total {
        // Mixed-radix digits, last axis fastest.
        let mut picks = vec![0; axes.len()];
        for (a, pick) in axes.iter().zip(picks.iter_mut()).rev() {
            *pick = i % a.values.len();
            i /= a.values.len();
        }
        let pairs: Vec<(&str, &str)> = axes
            .iter()
            .zip(&picks)
            .map(|(a, &p)| (a.key.as_str(), a.values[p].as_str()))
            .collect();
        out.push(Combination {
            overrides: pairs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            label: pairs
                .iter()
                .zip(&short)
                .map(|((_, v), k)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
        });
    }
    Ok(out)
}

/// For each key, its shortest dotted suffix that no other key ends with (`train.lr` → `lr`,
/// but `train.scheduler.gamma` and `x.gamma` keep `scheduler.gamma` and `x.gamma`).
pub(crate) fn short_keys(keys: &[&str]) -> Vec<String> {
    let suffix = |k: &str, n: usize| -> String {
        let parts: Vec<&str> = k.split('.').collect();
        parts[parts.len().saturating_sub(n)..].join(".")
    };
    keys.iter()
        .map(|k| {
            let depth = k.split('.').count();
            (1..=depth)
                .map(|n| suffix(k, n))
                .find(|s| {
                    keys.iter()
                        .filter(|o| *o != k)
                        .all(|o| o != s && !o.ends_with(&format!(".{s}")))
                })
                .unwrap_or_else(|| k.to_string())
        })
        .collect()
}
