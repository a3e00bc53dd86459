//! A scheduled search (`ddp sweep --scheduler asha`, or a sweep file with a `[scheduler]`): what
//! it is ([`Search`]: the space, how it is searched, the scheduler), its state in the sweep's
//! manifest ([`SearchState`]: each trial's run, its results at the rungs, its state, and ASHA's
//! promotions), and the step the sweep's process takes each time it looks at its trials
//! ([`SearchState::advance`]). Pure: the process reads the runs, calls `advance` with what it
//! saw ([`Seen`]) and carries out the returned [`Act`]s (create and start a trial's run, resume
//! a paused one), saving the state after each.
//!
//! A trial trains up to its `target` budget and pauses there (`ddp-trainer --pause-at`, epochs
//! or steps); the last rung's target is the end of the run (`train.epochs` or `train.steps` of
//! every trial is set to the scheduler's `max`). Its value at a rung is the metric of the
//! validation at that budget.

use std::collections::{BTreeMap, BTreeSet};

use ddp_trainer::metrics::{MetricKind, MetricRecord};
use serde::{Deserialize, Serialize};

use super::asha::{self, Action, Board, Mode, Verdict};
use super::file::{Method, Metric, Scheduler, Unit};
use super::grid::{GridAxis, MAX_RUNS, combinations, short_keys};
use super::space::{Dist, Param, trial_overrides};
use crate::{Error, Result};

/// The trials of a search: its parameters, how they are drawn (at random or as a grid), how
/// many, the seed. A search without a scheduler is its trials, each trained to its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialSpace {
    pub method: Method,
    pub params: Vec<Param>,
    /// How many trials (a grid: its number of combinations).
    pub trials: u32,
    pub seed: u64,
}

/// What a scheduled search is: its trials and the scheduler that stops the bad ones early.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Search {
    #[serde(flatten)]
    pub space: TrialSpace,
    pub scheduler: Scheduler,
}

impl TrialSpace {
    /// Checked trials: parameters, distinct keys, `trials` for a random search (1 to
    /// [`MAX_RUNS`]) and only choices for a grid (whose trials are its combinations).
    pub fn new(
        method: Method,
        params: Vec<Param>,
        trials: Option<u32>,
        seed: u64,
    ) -> Result<TrialSpace> {
        if params.is_empty() {
            return Err(Error::Invalid(
                "a search needs at least one parameter (--param KEY=KIND:ARGS, or \
                 [search.params] in a sweep file)"
                    .into(),
            ));
        }
        trial_overrides(&params, seed, 0)?;
        let trials = match method {
            Method::Random => match trials {
                Some(n) if n >= 1 && n as usize <= MAX_RUNS => n,
                Some(n) => {
                    return Err(Error::Invalid(format!(
                        "--trials {n}: a search has 1 to {MAX_RUNS} trials"
                    )));
                }
                None => {
                    return Err(Error::Invalid(
                        "a random search needs --trials N (how many trials to draw)".into(),
                    ));
                }
            },
            Method::Grid => {
                if trials.is_some() {
                    return Err(Error::Invalid(
                        "--trials: a grid runs every combination of its choices; leave \
                         --trials out or search at random"
                            .into(),
                    ));
                }
                combinations(&grid_axes(&params)?)?.len() as u32
            }
        };
        Ok(TrialSpace {
            method,
            params,
            trials,
            seed,
        })
    }

    /// Trial `n`'s values, as spec overrides.
    pub fn values(&self, n: u32) -> Result<Vec<String>> {
        Ok(match self.method {
            Method::Random => trial_overrides(&self.params, self.seed, n)?,
            Method::Grid => {
                combinations(&grid_axes(&self.params)?)?
                    .swap_remove(n as usize)
                    .overrides
            }
        })
    }

    /// Trial `n`'s label: `t07 lr=0.0031,batch_size=32` (its number and the space's values
    /// by their shortest keys).
    pub fn label(&self, n: u32) -> Result<String> {
        let keys: Vec<&str> = self.params.iter().map(|p| p.key.as_str()).collect();
        let short = short_keys(&keys);
        let values = self.values(n)?;
        let parts: Vec<String> = values
            .iter()
            .zip(&short)
            .map(|(o, k)| {
                format!(
                    "{k}={}",
                    short_value(o.split_once('=').map_or("", |(_, v)| v))
                )
            })
            .collect();
        Ok(format!("t{n:02} {}", parts.join(",")))
    }
}

impl Search {
    /// A checked search of `scheduler` over [`TrialSpace::new`]'s trials.
    pub fn new(
        method: Method,
        params: Vec<Param>,
        trials: Option<u32>,
        seed: u64,
        scheduler: Scheduler,
    ) -> Result<Search> {
        Ok(Search {
            space: TrialSpace::new(method, params, trials, seed)?,
            scheduler,
        })
    }

    /// Trial `n`'s spec overrides: the space's values, then its budget (`train.epochs` or
    /// `train.steps` set to the scheduler's `max`).
    pub fn overrides(&self, n: u32) -> Result<Vec<String>> {
        let mut o = self.space.values(n)?;
        o.push(self.budget_override());
        Ok(o)
    }

    /// `train.epochs=MAX` or `train.steps=MAX`.
    pub fn budget_override(&self) -> String {
        let key = match self.scheduler.unit {
            Unit::Epochs => "train.epochs",
            Unit::Steps => "train.steps",
        };
        format!("{key}={}", self.scheduler.asha.max)
    }

    /// Trial `n`'s label ([`TrialSpace::label`]).
    pub fn label(&self, n: u32) -> Result<String> {
        self.space.label(n)
    }

    /// The rungs' budgets.
    pub fn rungs(&self) -> Vec<u64> {
        self.scheduler.asha.rungs()
    }

    /// Where a trial training to `to` pauses (`epoch:N`, `step:N`); none at the last rung.
    pub fn pause_at(&self, to: u64) -> Option<String> {
        (to < self.scheduler.asha.max).then(|| match self.scheduler.unit {
            Unit::Epochs => format!("epoch:{to}"),
            Unit::Steps => format!("step:{to}"),
        })
    }

    /// The metric of the validation at `budget` among a run's rank-0 `records` (the last one,
    /// where a resumed run validated the same point again).
    pub fn value_at(&self, records: &[MetricRecord], budget: u64) -> Option<f64> {
        records
            .iter()
            .filter(|r| r.kind == MetricKind::Val)
            .filter(|r| match self.scheduler.unit {
                Unit::Epochs => r.epoch as u64 == budget,
                Unit::Steps => r.step == budget,
            })
            .filter_map(|r| match self.scheduler.metric {
                Metric::ValLoss => Some(r.loss),
                Metric::ValAccuracy => r.accuracy,
                Metric::Perplexity => r.perplexity,
            })
            .next_back()
    }

    /// The metric's name as the views show it.
    pub fn metric_name(&self) -> &'static str {
        match self.scheduler.metric {
            Metric::ValLoss => "val_loss",
            Metric::ValAccuracy => "val_accuracy",
            Metric::Perplexity => "perplexity",
        }
    }
}

/// A drawn float in 4 significant digits for a label (`0.002057`, `3.142e-5`); other values as
/// they are.
fn short_value(v: &str) -> String {
    match v.parse::<f64>() {
        Ok(x) if v.contains(['.', 'e', 'E']) && x != 0.0 && x.is_finite() => {
            if (1e-3..1e4).contains(&x.abs()) {
                let decimals = (3 - x.abs().log10().floor() as i32).max(0) as usize;
                let s = format!("{x:.decimals$}");
                if s.contains('.') {
                    s.trim_end_matches('0').trim_end_matches('.').to_string()
                } else {
                    s
                }
            } else {
                format!("{x:.3e}")
            }
        }
        _ => v.to_string(),
    }
}

/// A grid's axes: every parameter's choices.
fn grid_axes(params: &[Param]) -> Result<Vec<GridAxis>> {
    params
        .iter()
        .map(|p| match &p.dist {
            Dist::Choice(values) => Ok(GridAxis {
                key: p.key.clone(),
                values: values.clone(),
            }),
            _ => Err(Error::Invalid(format!(
                "{}: a grid takes choices only (KEY=choice:V1,V2,...); search at random for \
                 other distributions",
                p.key
            ))),
        })
        .collect()
}

/// Whether the search goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchStatus {
    Running,
    Completed,
    Stopped,
}

impl SearchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SearchStatus::Running => "running",
            SearchStatus::Completed => "completed",
            SearchStatus::Stopped => "stopped",
        }
    }
}

/// Where a trial stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialState {
    /// Its run is queued or training towards `target`.
    Running,
    /// Paused at a rung by the scheduler; it may be promoted later.
    Paused,
    /// Reached the last rung.
    Completed,
    Failed,
    /// Stopped with its sweep (or by hand); resuming the sweep resumes it.
    Stopped,
}

impl TrialState {
    pub fn as_str(self) -> &'static str {
        match self {
            TrialState::Running => "running",
            TrialState::Paused => "paused",
            TrialState::Completed => "completed",
            TrialState::Failed => "failed",
            TrialState::Stopped => "stopped",
        }
    }
}

/// A trial's metric at a rung; `None`: the trial failed before it (ranks last).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RungResult {
    pub budget: u64,
    pub value: Option<f64>,
}

/// One trial of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub number: u32,
    /// Its run's id (empty until the run is created).
    pub run: String,
    pub label: String,
    pub overrides: Vec<String>,
    /// The budget it trains to now (the next rung).
    pub target: u64,
    /// Its results at the rungs it reached, in rung order.
    pub results: Vec<RungResult>,
    pub state: TrialState,
}

impl Trial {
    /// Its result at the highest rung it reached.
    pub fn last(&self) -> Option<&RungResult> {
        self.results.last()
    }
}

/// What the sweep's process saw of a running trial's run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Seen {
    /// Queued, running or restarting.
    InFlight,
    /// Paused at, or completed, its target: the metric there (`None`: no validation there).
    Reached(Option<f64>),
    Failed,
    Stopped,
}

/// What the sweep's process does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// Create trial `trial`'s run (its overrides) and start it, pausing at `pause_at`.
    Start {
        trial: u32,
        pause_at: Option<String>,
    },
    /// Resume trial `trial`'s run from its checkpoint, pausing at `pause_at`.
    Resume {
        trial: u32,
        pause_at: Option<String>,
    },
}

/// A search's state, kept in its sweep's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchState {
    pub search: Search,
    pub status: SearchStatus,
    pub trials: Vec<Trial>,
    /// ASHA's promotions: by rung, the trials that went on from it.
    #[serde(default)]
    pub promoted: Vec<Vec<u32>>,
}

impl SearchState {
    /// A search about to start: no trials yet.
    pub fn new(search: Search) -> SearchState {
        SearchState {
            search,
            status: SearchStatus::Running,
            trials: Vec::new(),
            promoted: Vec::new(),
        }
    }

    /// ASHA's board: every trial's results and the promotions.
    fn board(&self) -> Board {
        let rungs = self.search.rungs();
        let mut board = Board::new(rungs.len());
        for t in &self.trials {
            for r in &t.results {
                if let Some(k) = rungs.iter().position(|&b| b == r.budget) {
                    board.record(k, t.number, r.value.unwrap_or(f64::NAN));
                }
            }
        }
        for (k, trials) in self.promoted.iter().enumerate().take(rungs.len()) {
            board.promoted[k] = trials.iter().copied().collect::<BTreeSet<u32>>();
        }
        board
    }

    /// The trial of number `n`.
    pub fn trial_mut(&mut self, n: u32) -> Option<&mut Trial> {
        self.trials.iter_mut().find(|t| t.number == n)
    }

    /// Trials whose runs are queued or training.
    pub fn in_flight(&self) -> usize {
        self.trials
            .iter()
            .filter(|t| t.state == TrialState::Running)
            .count()
    }

    /// Applies what was `seen` of the running trials (by number), then fills up to
    /// `max_parallel` trials in flight: promotions of paused trials first, then new trials.
    /// Returns what to do; the search is `completed` when nothing is left to train.
    pub fn advance(&mut self, seen: &BTreeMap<u32, Seen>, max_parallel: usize) -> Vec<Act> {
        let asha = self.search.scheduler.asha;
        let rungs = self.search.rungs();
        let mut board = self.board();
        let mut acts = Vec::new();
        for t in self.trials.iter_mut() {
            if t.state != TrialState::Running {
                continue;
            }
            match seen.get(&t.number).copied().unwrap_or(Seen::InFlight) {
                Seen::InFlight => {}
                Seen::Reached(value) => {
                    t.results.push(RungResult {
                        budget: t.target,
                        value,
                    });
                    let v = value.unwrap_or(f64::NAN);
                    match asha::reached(&asha, &mut board, t.number, t.target, v) {
                        Ok(Verdict::GoOn { to }) => {
                            t.target = to;
                            acts.push(Act::Resume {
                                trial: t.number,
                                pause_at: self.search.pause_at(to),
                            });
                        }
                        Ok(Verdict::Pause) => t.state = TrialState::Paused,
                        Ok(Verdict::Complete) | Err(_) => t.state = TrialState::Completed,
                    }
                }
                Seen::Failed => {
                    if let Some(k) = rungs.iter().position(|&b| b == t.target) {
                        board.record(k, t.number, f64::NAN);
                    }
                    t.results.push(RungResult {
                        budget: t.target,
                        value: None,
                    });
                    t.state = TrialState::Failed;
                }
                Seen::Stopped => t.state = TrialState::Stopped,
            }
        }
        if self.status == SearchStatus::Running {
            let free = max_parallel.max(1).saturating_sub(self.in_flight());
            let new_left = (self.search.space.trials as usize).saturating_sub(self.trials.len());
            for a in asha::next_actions(&asha, &mut board, free, new_left) {
                match a {
                    Action::Resume { trial, to } => {
                        let pause_at = self.search.pause_at(to);
                        if let Some(t) = self.trial_mut(trial) {
                            t.target = to;
                            t.state = TrialState::Running;
                        }
                        acts.push(Act::Resume { trial, pause_at });
                    }
                    Action::Start { to } => {
                        let n = self.trials.len() as u32;
                        let (label, overrides) =
                            match (self.search.label(n), self.search.overrides(n)) {
                                (Ok(l), Ok(o)) => (l, o),
                                _ => (format!("t{n:02}"), Vec::new()),
                            };
                        self.trials.push(Trial {
                            number: n,
                            run: String::new(),
                            label,
                            overrides,
                            target: to,
                            results: Vec::new(),
                            state: TrialState::Running,
                        });
                        acts.push(Act::Start {
                            trial: n,
                            pause_at: self.search.pause_at(to),
                        });
                    }
                }
            }
            if self.in_flight() == 0 && new_left == 0 && acts.is_empty() {
                self.status = SearchStatus::Completed;
            }
        }
        self.promoted = board
            .promoted
            .iter()
            .map(|s| s.iter().copied().collect())
            .collect();
        acts
    }

    /// Paused trial `n` was resumed by hand to train to `to`: it runs again, promoted from the
    /// rung it paused at.
    pub fn promote_by_hand(&mut self, n: u32, to: u64) {
        let rungs = self.search.rungs();
        let Some(t) = self.trial_mut(n) else {
            return;
        };
        let from = t
            .last()
            .and_then(|r| rungs.iter().position(|&b| b == r.budget));
        t.state = TrialState::Running;
        t.target = to;
        if let Some(k) = from {
            if self.promoted.len() <= k {
                self.promoted.resize(k + 1, Vec::new());
            }
            if !self.promoted[k].contains(&n) {
                self.promoted[k].push(n);
            }
        }
    }

    /// A running search's stopped trials (stopped with it) are resumed to their targets.
    pub fn resume(&mut self) -> Vec<Act> {
        let mut acts = Vec::new();
        for t in self.trials.iter_mut() {
            if t.state == TrialState::Stopped {
                t.state = TrialState::Running;
                acts.push(Act::Resume {
                    trial: t.number,
                    pause_at: self.search.pause_at(t.target),
                });
            }
        }
        acts
    }

    /// The trials best first: the highest rung reached, then the metric there (a failed
    /// trial's missing value last), then the trial's number.
    pub fn leaderboard(&self) -> Vec<&Trial> {
        let mode = self.search.scheduler.asha.mode;
        let mut board: Vec<&Trial> = self.trials.iter().collect();
        board.sort_by(|a, b| {
            let rung = |t: &Trial| t.last().map_or(0, |r| r.budget);
            let value = |t: &Trial| t.last().and_then(|r| r.value).filter(|v| !v.is_nan());
            rung(b)
                .cmp(&rung(a))
                .then_with(|| match (value(a), value(b)) {
                    (Some(x), Some(y)) => match mode {
                        Mode::Min => x.total_cmp(&y),
                        Mode::Max => y.total_cmp(&x),
                    },
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                })
                .then(a.number.cmp(&b.number))
        });
        board
    }

    /// The budget trained so far (each trial up to the highest rung it reached) and that of
    /// every trial to the end.
    pub fn budget_used(&self) -> (u64, u64) {
        let used = self
            .trials
            .iter()
            .map(|t| t.last().map_or(0, |r| r.budget))
            .sum();
        (
            used,
            self.search.space.trials as u64 * self.search.scheduler.asha.max,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::asha::Asha;

    fn search(trials: u32) -> Search {
        Search::new(
            Method::Random,
            vec!["train.lr=loguniform:1e-4:1e-1".parse().unwrap()],
            Some(trials),
            7,
            Scheduler {
                asha: Asha::new(1, 9, 3, Mode::Min).unwrap(),
                metric: Metric::ValLoss,
                unit: Unit::Epochs,
            },
        )
        .unwrap()
    }

    fn seen(pairs: &[(u32, Seen)]) -> BTreeMap<u32, Seen> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn trials_carry_their_values_and_the_budget() {
        let s = search(3);
        let o = s.overrides(1).unwrap();
        assert_eq!(o.len(), 2);
        assert!(o[0].starts_with("train.lr="), "{o:?}");
        assert_eq!(o[1], "train.epochs=9");
        assert!(s.label(1).unwrap().starts_with("t01 lr="));
        for (v, short) in [
            ("0.0020574357987221815", "0.002057"),
            ("0.09074930192211524", "0.09075"),
            ("3.1e-5", "3.100e-5"),
            ("32", "32"),
            ("\"adam\"", "\"adam\""),
            ("2.5", "2.5"),
        ] {
            assert_eq!(short_value(v), short, "{v}");
        }
        assert_eq!(s.pause_at(3).as_deref(), Some("epoch:3"));
        assert_eq!(s.pause_at(9), None);
    }

    #[test]
    fn a_search_fills_its_slots_pauses_the_worse_and_promotes_later() {
        let mut st = SearchState::new(search(6));
        let acts = st.advance(&BTreeMap::new(), 2);
        assert_eq!(
            acts,
            [
                Act::Start {
                    trial: 0,
                    pause_at: Some("epoch:1".into())
                },
                Act::Start {
                    trial: 1,
                    pause_at: Some("epoch:1".into())
                }
            ]
        );
        // Nothing new seen: nothing to do.
        assert!(st.advance(&seen(&[(0, Seen::InFlight)]), 2).is_empty());
        // Trial 0 reaches rung 1 first: 1 result, top ⌊1/3⌋ = 0: paused; trial 2 starts.
        let acts = st.advance(&seen(&[(0, Seen::Reached(Some(0.5)))]), 2);
        assert_eq!(st.trials[0].state, TrialState::Paused);
        assert!(
            matches!(acts[..], [Act::Start { trial: 2, .. }]),
            "{acts:?}"
        );
        // Trial 1 fails, trial 2 is worse than 0: three results at rung 1, trial 0 the best:
        // it is promoted to epoch 3 before a new trial starts.
        st.advance(&seen(&[(1, Seen::Failed)]), 2);
        let acts = st.advance(&seen(&[(2, Seen::Reached(Some(0.9)))]), 2);
        assert_eq!(
            acts[0],
            Act::Resume {
                trial: 0,
                pause_at: Some("epoch:3".into())
            },
            "{acts:?}"
        );
        assert_eq!(st.trials[0].target, 3);
        assert_eq!(st.promoted[0], [0]);
        assert_eq!(st.trials[1].state, TrialState::Failed);
        assert_eq!(st.budget_used(), (3, 54));
        let board: Vec<u32> = st.leaderboard().iter().map(|t| t.number).collect();
        assert_eq!(&board[..3], [0, 2, 1]);
    }

    #[test]
    fn a_search_completes_when_nothing_is_left_to_train() {
        let mut st = SearchState::new(search(1));
        st.advance(&BTreeMap::new(), 4);
        // One trial: alone at every rung, never in a top third: paused at rung 1 and done.
        st.advance(&seen(&[(0, Seen::Reached(Some(0.1)))]), 4);
        assert_eq!(st.trials[0].state, TrialState::Paused);
        assert_eq!(st.status, SearchStatus::Completed);
    }

    #[test]
    fn a_stopped_search_resumes_its_stopped_trials() {
        let mut st = SearchState::new(search(2));
        st.advance(&BTreeMap::new(), 2);
        st.advance(&seen(&[(0, Seen::Stopped)]), 2);
        st.status = SearchStatus::Running;
        let acts = st.resume();
        assert_eq!(
            acts,
            [Act::Resume {
                trial: 0,
                pause_at: Some("epoch:1".into())
            }]
        );
        assert_eq!(st.in_flight(), 2);
    }

    #[test]
    fn a_grid_search_runs_every_combination_and_refuses_other_distributions() {
        let sched = search(1).scheduler;
        let g = Search::new(
            Method::Grid,
            vec![
                "train.batch_size=choice:16,32".parse().unwrap(),
                "train.optimizer=choice:adam,sgd".parse().unwrap(),
            ],
            None,
            0,
            sched,
        )
        .unwrap();
        assert_eq!(g.space.trials, 4);
        assert_eq!(
            g.overrides(3).unwrap(),
            [
                "train.batch_size=32",
                "train.optimizer=sgd",
                "train.epochs=9"
            ]
        );
        let e = Search::new(
            Method::Grid,
            vec!["train.lr=uniform:0.1:0.2".parse().unwrap()],
            None,
            0,
            sched,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("a grid takes choices only"), "{e}");
        let e = Search::new(Method::Random, search(1).space.params, None, 0, sched)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--trials N"), "{e}");
    }

    #[test]
    fn a_rung_s_value_is_the_validation_at_its_budget() {
        let s = search(1);
        let val = |epoch: usize, loss: f64| MetricRecord {
            kind: MetricKind::Val,
            epoch,
            loss,
            ..MetricRecord::sample()
        };
        let records = [val(1, 0.9), val(2, 0.7), val(1, 0.8)];
        assert_eq!(s.value_at(&records, 1), Some(0.8));
        assert_eq!(s.value_at(&records, 3), None);
    }
}
