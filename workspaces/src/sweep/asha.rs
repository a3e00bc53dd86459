//! Asynchronous successive halving (ASHA, Li et al., "A System for Massively Parallel
//! Hyperparameter Tuning", 2020) as a pure policy: what to do with a trial that reached a rung,
//! and what to start when slots are free. No I/O: the sweep's process records results, asks,
//! and acts ([`Action`]).
//!
//! The rungs are budgets (epochs or steps) `min · ηᵏ` up to `max` (`max` itself is the last
//! rung, whether or not it is such a power). A trial that reaches rung `k` below the last
//! goes on only while it is among the best `⌊n/η⌋` of the `n` results rung `k` has recorded so
//! far (itself included) and has not been promoted from it yet; otherwise it is paused. A
//! paused trial is promoted later, when enough results came in below it, by [`next_actions`]:
//! free slots go first to promotions, highest rung first, then to new trials. Ties are broken
//! by trial number (the earlier trial wins), so every decision is reproducible.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Whether smaller or larger metric values are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Min,
    Max,
}

/// The scheduler's settings: rungs from `min` to `max` budget, reduction factor `eta`, and the
/// metric's `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asha {
    pub min: u64,
    pub max: u64,
    pub eta: u64,
    pub mode: Mode,
}

impl Asha {
    /// Checked settings: `1 <= min <= max`, `eta >= 2`.
    pub fn new(min: u64, max: u64, eta: u64, mode: Mode) -> Result<Asha> {
        if min == 0 || min > max {
            return Err(Error::Invalid(format!(
                "ASHA's budgets need 1 <= min <= max; got min {min}, max {max}"
            )));
        }
        if eta < 2 {
            return Err(Error::Invalid(format!(
                "ASHA's reduction factor must be at least 2; got {eta}"
            )));
        }
        Ok(Asha {
            min,
            max,
            eta,
            mode,
        })
    }

    /// The rungs' budgets, ascending: `min, min·η, min·η², ...` below `max`, then `max`.
    pub fn rungs(&self) -> Vec<u64> {
        let mut rungs = Vec::new();
        let mut b = self.min;
        while b < self.max {
            rungs.push(b);
            b = b.saturating_mul(self.eta);
        }
        rungs.push(self.max);
        rungs
    }

    /// Whether `a` is better than `b` (a tie is neither).
    fn better(&self, a: f64, b: f64) -> bool {
        match self.mode {
            Mode::Min => a < b,
            Mode::Max => a > b,
        }
    }
}

/// What the sweep has seen: per rung, each trial's result there and whether it was promoted
/// from it (it went on, or was resumed, towards the next rung).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Board {
    /// `results[k]`: (trial, value) recorded at rung `k`, in arrival order.
    pub results: Vec<Vec<(u32, f64)>>,
    /// `promoted[k]`: trials promoted from rung `k`.
    pub promoted: Vec<BTreeSet<u32>>,
}

impl Board {
    /// An empty board of `rungs` rungs.
    pub fn new(rungs: usize) -> Board {
        Board {
            results: vec![Vec::new(); rungs],
            promoted: vec![BTreeSet::new(); rungs],
        }
    }

    /// Records `trial`'s `value` at rung `k` (a NaN, a diverged run, ranks last). A second
    /// result of the same trial at the same rung replaces the first.
    pub fn record(&mut self, k: usize, trial: u32, value: f64) {
        let rung = &mut self.results[k];
        match rung.iter_mut().find(|(t, _)| *t == trial) {
            Some(r) => r.1 = value,
            None => rung.push((trial, value)),
        }
    }

    /// The trials rung `k` would promote now: its best `⌊n/η⌋`, best first, those already
    /// promoted included.
    fn top(&self, asha: &Asha, k: usize) -> Vec<u32> {
        let mut rung = self.results[k].clone();
        rung.sort_by(|a, b| {
            let worse = |x: f64, y: f64| x.is_nan() && !y.is_nan();
            if worse(a.1, b.1) || (!b.1.is_nan() && asha.better(b.1, a.1)) {
                std::cmp::Ordering::Greater
            } else if worse(b.1, a.1) || (!a.1.is_nan() && asha.better(a.1, b.1)) {
                std::cmp::Ordering::Less
            } else {
                a.0.cmp(&b.0)
            }
        });
        let keep = rung.len() / asha.eta as usize;
        rung.into_iter().take(keep).map(|(t, _)| t).collect()
    }

    /// Rung `k`'s trials that may be promoted and were not yet, best first.
    fn promotable(&self, asha: &Asha, k: usize) -> Vec<u32> {
        self.top(asha, k)
            .into_iter()
            .filter(|t| !self.promoted[k].contains(t))
            .collect()
    }
}

/// What becomes of a trial that just recorded its result at a rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Trains on to the next rung's budget (now promoted from this rung).
    GoOn { to: u64 },
    /// Stops here with a checkpoint; [`next_actions`] may resume it later.
    Pause,
    /// Reached the last rung: the trial is complete.
    Complete,
}

/// Records `trial`'s `value` at the rung of `budget` and says what becomes of it; an error when
/// `budget` is no rung.
pub fn reached(
    asha: &Asha,
    board: &mut Board,
    trial: u32,
    budget: u64,
    value: f64,
) -> Result<Verdict> {
    let rungs = asha.rungs();
    let k = rungs
        .iter()
        .position(|&b| b == budget)
        .ok_or_else(|| Error::Invalid(format!("{budget} is no rung of {rungs:?}")))?;
    board.record(k, trial, value);
    if k + 1 == rungs.len() {
        return Ok(Verdict::Complete);
    }
    if board.promotable(asha, k).contains(&trial) {
        board.promoted[k].insert(trial);
        return Ok(Verdict::GoOn { to: rungs[k + 1] });
    }
    Ok(Verdict::Pause)
}

/// What to do with a free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Resume paused `trial` from its checkpoint, to train up to budget `to`.
    Resume { trial: u32, to: u64 },
    /// Start a new trial, up to the first rung's budget.
    Start { to: u64 },
}

/// The actions for `free` slots: promotions of paused trials (highest rung first, best first
/// within a rung), then up to `new_left` new trials. The promotions are marked on `board`.
pub fn next_actions(asha: &Asha, board: &mut Board, free: usize, new_left: usize) -> Vec<Action> {
    let rungs = asha.rungs();
    let mut actions = Vec::new();
    for k in (0..rungs.len() - 1).rev() {
        for trial in board.promotable(asha, k) {
            if actions.len() == free {
                return actions;
            }
            board.promoted[k].insert(trial);
            actions.push(Action::Resume {
                trial,
                to: rungs[k + 1],
            });
        }
    }
    let starts = (free - actions.len()).min(new_left);
    actions.extend((0..starts).map(|_| Action::Start { to: rungs[0] }));
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asha(mode: Mode) -> Asha {
        Asha::new(1, 9, 3, mode).unwrap()
    }

    #[test]
    fn rungs_are_powers_of_eta_then_the_maximum() {
        let cases: &[(u64, u64, u64, &[u64])] = &[
            (1, 9, 3, &[1, 3, 9]),
            (1, 10, 3, &[1, 3, 9, 10]),
            (2, 16, 2, &[2, 4, 8, 16]),
            (5, 5, 3, &[5]),
            (1, 2, 4, &[1, 2]),
        ];
        for &(min, max, eta, want) in cases {
            let a = Asha::new(min, max, eta, Mode::Min).unwrap();
            assert_eq!(a.rungs(), want, "{min}..{max} eta {eta}");
        }
    }

    #[test]
    fn bad_settings_are_refused() {
        for (min, max, eta, msg) in [
            (0, 9, 3, "1 <= min <= max"),
            (10, 9, 3, "1 <= min <= max"),
            (1, 9, 1, "at least 2"),
        ] {
            let e = Asha::new(min, max, eta, Mode::Min).unwrap_err().to_string();
            assert!(e.contains(msg), "{e}");
        }
    }

    /// Each row: a trial reaches a rung with a value, and what becomes of it (the board
    /// carries over from row to row).
    #[test]
    fn a_trial_goes_on_only_in_the_top_third_of_its_rung() {
        use Verdict::*;
        let rows: &[(u32, u64, f64, Verdict)] = &[
            // Fewer than 3 results at rung 1: nobody is in the top ⌊n/3⌋.
            (0, 1, 0.50, Pause),
            (1, 1, 0.40, Pause),
            // The third result: 1 may go on, the best; trial 2 is it.
            (2, 1, 0.30, GoOn { to: 3 }),
            // Worse than the promoted one: the top third of 4 is still 1.
            (3, 1, 0.35, Pause),
            (4, 1, 0.90, Pause),
            // 6 results: the top 2 are 2 (promoted) and 5.
            (5, 1, 0.20, GoOn { to: 3 }),
            // At rung 3, fewer than 3 results.
            (2, 3, 0.10, Pause),
            // The last rung completes whatever the value.
            (7, 9, 9.0, Complete),
        ];
        let a = asha(Mode::Min);
        let mut board = Board::new(a.rungs().len());
        for &(trial, budget, value, want) in rows {
            let got = reached(&a, &mut board, trial, budget, value).unwrap();
            assert_eq!(got, want, "trial {trial} at {budget} with {value}");
        }
        assert!(reached(&a, &mut board, 8, 4, 0.1).is_err());
    }

    #[test]
    fn larger_is_better_in_max_mode_and_nan_is_worst() {
        let a = asha(Mode::Max);
        let mut board = Board::new(3);
        reached(&a, &mut board, 0, 1, f64::NAN).unwrap();
        reached(&a, &mut board, 1, 1, 0.1).unwrap();
        assert_eq!(reached(&a, &mut board, 2, 1, 0.05).unwrap(), Verdict::Pause);
        // The best of three is trial 1's 0.1, not the NaN.
        assert_eq!(
            next_actions(&a, &mut board, 1, 0),
            [Action::Resume { trial: 1, to: 3 }]
        );
        // A tie goes to the earlier trial: the third result promotes trial 0, paused.
        let mut board = Board::new(3);
        for t in 0..3 {
            assert_eq!(reached(&a, &mut board, t, 1, 0.5).unwrap(), Verdict::Pause);
        }
        assert_eq!(
            next_actions(&a, &mut board, 1, 0),
            [Action::Resume { trial: 0, to: 3 }]
        );
    }

    #[test]
    fn free_slots_promote_paused_trials_highest_rung_first_then_start_new_ones() {
        let a = asha(Mode::Min);
        let mut board = Board::new(3);
        // Rung 1: six paused results (recorded without verdicts, as after a restart).
        for (t, v) in [(0, 0.6), (1, 0.5), (2, 0.4), (3, 0.3), (4, 0.2), (5, 0.1)] {
            board.record(0, t, v);
        }
        // Rung 3: three results, of trials promoted before.
        for (t, v) in [(3, 0.05), (4, 0.04), (5, 0.03)] {
            board.promoted[0].insert(t);
            board.record(1, t, v);
        }
        let got = next_actions(&a, &mut board, 3, 10);
        assert_eq!(
            got,
            [
                Action::Resume { trial: 5, to: 9 },
                // Rung 1's top 2 are 5 and 4, both promoted already: no resume there.
                Action::Start { to: 1 },
                Action::Start { to: 1 },
            ]
        );
        // Promotions are remembered: the same board gives nothing to resume again.
        assert_eq!(next_actions(&a, &mut board, 1, 0), []);
        // No slot, no action; no new trial left, only promotions.
        assert_eq!(next_actions(&a, &mut board, 0, 5), []);
    }

    /// The whole search of the measure: 27 trials, rungs 1, 3, 9, η = 3, run one at a
    /// time to their verdicts: 9 go to 3 epochs, 3 to 9, and the epochs spent are 27 + 9·2 +
    /// 3·6 = 63 of the full search's 243.
    #[test]
    fn twenty_seven_trials_spend_a_quarter_of_the_full_search() {
        let a = asha(Mode::Min);
        let mut board = Board::new(3);
        // Trial t's value at any budget b: better with more budget; trials differ.
        let value = |t: u32, b: u64| ((t * 7919) % 27) as f64 / (b as f64);
        let (mut started, mut epochs, mut complete) = (0u32, 0u64, 0);
        let mut queue: Vec<(u32, u64, u64)> = Vec::new(); // (trial, from, to)
        loop {
            if queue.is_empty() {
                for action in next_actions(&a, &mut board, 1, 27 - started as usize) {
                    match action {
                        Action::Start { to } => {
                            queue.push((started, 0, to));
                            started += 1;
                        }
                        Action::Resume { trial, to } => {
                            let from =
                                a.rungs()[a.rungs().iter().position(|&b| b == to).unwrap() - 1];
                            queue.push((trial, from, to));
                        }
                    }
                }
            }
            let Some((t, from, to)) = queue.pop() else {
                break;
            };
            epochs += to - from;
            match reached(&a, &mut board, t, to, value(t, to)).unwrap() {
                Verdict::GoOn { to: next } => queue.push((t, to, next)),
                Verdict::Pause => {}
                Verdict::Complete => complete += 1,
            }
        }
        assert_eq!(started, 27);
        assert_eq!(
            (board.promoted[0].len(), board.promoted[1].len(), complete),
            (9, 3, 3)
        );
        assert_eq!(epochs, 63);
    }
}
