//! A scheduled search in words, as `ddp sweep show` and `%ddp sweep show` print it: what it
//! searches, its budget used, each rung's results and promotions, and the leaderboard; and a
//! sweep's parallel coordinates ([`parallel`]).

use crate::index::summary::Summary;
use crate::present::plot::parallel::{Line, Parallel};
use crate::present::report::Table;
use crate::runs::run::Run;
use crate::sweep::SweepRecord;
use crate::sweep::file::{Method, Unit};
use crate::sweep::trials::{SearchState, TrialState};

/// `63 of 243 epochs (26 %)`.
pub fn budget_text(state: &SearchState) -> String {
    let (used, full) = state.budget_used();
    let unit = match state.search.scheduler.unit {
        Unit::Epochs => "epochs",
        Unit::Steps => "steps",
    };
    let pct = if full > 0 {
        100.0 * used as f64 / full as f64
    } else {
        0.0
    };
    format!("{used} of {full} {unit} ({pct:.0} %)")
}

/// How many trials are in each state: `2 running, 20 paused, 3 completed, 2 failed`.
pub fn states_text(state: &SearchState) -> String {
    let all = [
        TrialState::Running,
        TrialState::Paused,
        TrialState::Completed,
        TrialState::Failed,
        TrialState::Stopped,
    ];
    let parts: Vec<String> = all
        .iter()
        .filter_map(|s| {
            let n = state.trials.iter().filter(|t| t.state == *s).count();
            (n > 0).then(|| format!("{n} {}", s.as_str()))
        })
        .collect();
    let left = (state.search.space.trials as usize).saturating_sub(state.trials.len());
    let mut text = if parts.is_empty() {
        "none started".to_string()
    } else {
        parts.join(", ")
    };
    if left > 0 {
        text.push_str(&format!(", {left} not started"));
    }
    text
}

/// A value as the leaderboard shows it.
fn value_text(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.4}"),
        Some(_) => "nan".into(),
        None => "-".into(),
    }
}

/// The leaderboard: trials best first (see `SearchState::leaderboard`).
pub fn leaderboard(state: &SearchState) -> Table {
    let metric = state.search.metric_name().to_uppercase();
    let header = [
        "#",
        "TRIAL",
        "RUN",
        "STATE",
        "RUNG",
        metric.as_str(),
        "PARAMS",
    ];
    let rows = state
        .leaderboard()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let params = t
                .label
                .split_once(' ')
                .map_or(t.label.as_str(), |(_, p)| p)
                .to_string();
            vec![
                (i + 1).to_string(),
                format!("t{:02}", t.number),
                t.run.clone(),
                t.state.as_str().to_string(),
                t.last().map_or("-".into(), |r| r.budget.to_string()),
                value_text(t.last().and_then(|r| r.value)),
                params,
            ]
        })
        .collect();
    Table::new(&header, rows)
}

/// Each rung: its budget, how many results it has, which trials went on from it.
pub fn rungs_text(state: &SearchState) -> String {
    let rungs = state.search.rungs();
    let unit = match state.search.scheduler.unit {
        Unit::Epochs => "epoch",
        Unit::Steps => "step",
    };
    let mut out = String::new();
    for (k, budget) in rungs.iter().enumerate() {
        let results = state
            .trials
            .iter()
            .filter(|t| t.results.iter().any(|r| r.budget == *budget))
            .count();
        let promoted = state.promoted.get(k).cloned().unwrap_or_default();
        let s = if *budget == 1 { "" } else { "s" };
        let mut line = format!("  rung {} ({budget} {unit}{s}): {results} results", k + 1);
        if !promoted.is_empty() {
            let names: Vec<String> = promoted.iter().map(|n| format!("t{n:02}")).collect();
            line.push_str(&format!(
                ", promoted {} ({})",
                names.join(", "),
                promoted.len()
            ));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `ddp sweep show` of a scheduled search; `driver`: its driver's pid when one runs.
pub fn show_text(record: &SweepRecord, state: &SearchState, driver: Option<u32>) -> String {
    let s = &state.search;
    let name = record
        .name
        .as_ref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    let driver = match driver {
        Some(pid) => format!(", driver pid {pid}"),
        None if state.status == crate::sweep::trials::SearchStatus::Running => {
            ", no driver: `ddp sweep resume` goes on".into()
        }
        None => String::new(),
    };
    let method = match s.space.method {
        Method::Grid => format!("grid, {} trials", s.space.trials),
        Method::Random => format!("random, {} trials, seed {}", s.space.trials, s.space.seed),
    };
    let a = &s.scheduler.asha;
    let rungs: Vec<String> = s.rungs().iter().map(u64::to_string).collect();
    let unit = match s.scheduler.unit {
        Unit::Epochs => "epochs",
        Unit::Steps => "steps",
    };
    let parallel = record
        .max_parallel
        .map_or("all at once".to_string(), |n| format!("{n} at a time"));
    let mode = match a.mode {
        crate::sweep::asha::Mode::Min => "min",
        crate::sweep::asha::Mode::Max => "max",
    };
    let mut out = format!(
        "sweep {}{name}: {}{driver}\nsearch: {method}; asha on {} ({mode}), rungs {} {unit}, eta {}; {parallel}\nbudget: {}; trials: {}\nrungs:\n{}",
        record.id,
        state.status.as_str(),
        s.metric_name(),
        rungs.join(", "),
        a.eta,
        budget_text(state),
        states_text(state),
        rungs_text(state),
    );
    if !state.trials.is_empty() {
        out.push_str("leaderboard:\n");
        out.push_str(&leaderboard(state).to_text());
    }
    out
}

/// A sweep's parallel coordinates: a search's trials by their parameters and their metric at
/// the highest rung they reached; a sweep without a scheduler's runs by the keys of its grid
/// (or draws) and their test accuracy (else their last validation loss). `runs`: the sweep's
/// runs (for a sweep without a scheduler).
pub fn parallel(record: &SweepRecord, runs: &[&Run]) -> Parallel {
    let short = |key: &str| key.rsplit('.').next().unwrap_or(key).to_string();
    let split = |overrides: &[String]| -> (Vec<String>, Vec<String>) {
        overrides
            .iter()
            .filter_map(|o| o.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .unzip()
    };
    if let Some(state) = &record.search {
        let names = state
            .search
            .space
            .params
            .iter()
            .map(|p| short(&p.key))
            .collect();
        let lines = state
            .trials
            .iter()
            .map(|t| Line {
                label: format!("t{:02}", t.number),
                values: split(&t.overrides).1,
                metric: t.last().and_then(|r| r.value),
            })
            .collect();
        let higher = state.search.scheduler.asha.mode == crate::sweep::asha::Mode::Max;
        return Parallel::new(names, state.search.metric_name(), lines, higher);
    }
    let keys: Vec<String> = record
        .runs
        .first()
        .map(|m| split(&m.overrides).0)
        .unwrap_or_default();
    let summaries: Vec<(String, Summary)> = runs
        .iter()
        .map(|r| (r.record.id.clone(), Summary::of(r)))
        .collect();
    let accuracy = summaries.iter().any(|(_, s)| s.test_accuracy.is_some());
    let lines = record
        .runs
        .iter()
        .map(|m| {
            let s = summaries
                .iter()
                .find(|(id, _)| *id == m.run)
                .map(|(_, s)| s);
            Line {
                label: m.label.clone(),
                values: split(&m.overrides).1,
                metric: s.and_then(|s| {
                    if accuracy {
                        s.test_accuracy
                    } else {
                        s.final_val_loss
                    }
                }),
            }
        })
        .collect();
    let metric = if accuracy {
        "test_accuracy"
    } else {
        "val_loss"
    };
    Parallel::new(
        keys.iter().map(|k| short(k)).collect(),
        metric,
        lines,
        accuracy,
    )
}
