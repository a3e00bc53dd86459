//! Elastic membership: which replicas form a group's next generation once one is lost.
//!
//! A replica keeps the identity it started with (its first rank, `id`). Generation 0 is every
//! replica of the launch; a replica that loses its ring asks the store for the generation after
//! its own, saying the last step it completed. The store sees every replica's connection, so it
//! decides: the next generation is the replicas that asked, once every member of the current
//! generation that is still connected has asked, or once `settle` has passed since the first
//! ask (a stopped process keeps its connection and never asks). Ranks of the new generation
//! follow the ids. The replicas that did not ask have left; replicas that were not members and
//! asked have joined.
//!
//! Pure policy ([`decide`], [`Board`]): the store's server holds a [`Board`] and answers each
//! ask with the [`Decision`] once there is one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One generation of a group: its number and its members' ids, ascending (a member's rank is
/// its position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub number: u64,
    pub members: Vec<u32>,
}

impl Generation {
    /// Generation 0 of a launch of `world` replicas: ids 0..world.
    pub fn first(world: usize) -> Generation {
        Generation {
            number: 0,
            members: (0..world as u32).collect(),
        }
    }

    /// The rank of replica `id` in this generation.
    pub fn rank_of(&self, id: u32) -> Option<usize> {
        self.members.binary_search(&id).ok()
    }
}

/// The next generation as the store decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub generation: Generation,
    /// The last step each member completed, in member order.
    pub steps: Vec<u64>,
    /// Members of the previous generation that are not members of this one.
    pub left: Vec<u32>,
    /// Members of this generation that were not members of the previous one.
    pub joined: Vec<u32>,
}

impl Decision {
    /// The most steps any member completed, and the rank of the first member that did: the
    /// replica whose state the others take when they differ (a step that some completed and
    /// others lost mid-way).
    pub fn most_advanced(&self) -> (u64, usize) {
        let best = self.steps.iter().copied().max().unwrap_or(0);
        let rank = self.steps.iter().position(|&s| s == best).unwrap_or(0);
        (best, rank)
    }
}

/// What the store answers an ask with, for now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Members still connected that have not asked yet.
    Wait {
        pending: Vec<u32>,
    },
    Decided(Decision),
}

/// Decides the generation after `current` from the asks so far (`asks`: id → last completed
/// step), whether each id still has a connection to the store (`connected`), and the time
/// since the first ask.
pub fn decide(
    current: &Generation,
    asks: &BTreeMap<u32, u64>,
    connected: impl Fn(u32) -> bool,
    waited: Duration,
    settle: Duration,
) -> Verdict {
    let pending: Vec<u32> = current
        .members
        .iter()
        .copied()
        .filter(|id| !asks.contains_key(id) && connected(*id))
        .collect();
    if asks.is_empty() || (!pending.is_empty() && waited < settle) {
        return Verdict::Wait { pending };
    }
    let members: Vec<u32> = asks.keys().copied().collect();
    let left = current
        .members
        .iter()
        .copied()
        .filter(|id| !asks.contains_key(id))
        .collect();
    let joined = members
        .iter()
        .copied()
        .filter(|id| current.members.binary_search(id).is_err())
        .collect();
    Verdict::Decided(Decision {
        generation: Generation {
            number: current.number + 1,
            members,
        },
        steps: asks.values().copied().collect(),
        left,
        joined,
    })
}

/// The store's record of a group's generations: the current one, the asks for the next, and
/// the decisions made (a slow replica asking for a decided generation gets the decision).
#[derive(Debug, Clone)]
pub struct Board {
    current: Generation,
    asks: BTreeMap<u32, u64>,
    first_ask: Option<Instant>,
    decided: BTreeMap<u64, Decision>,
}

/// The answer to one ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Decided(Decision),
    Wait {
        pending: Vec<u32>,
    },
    /// The ask names a generation that is neither the current one nor one decided.
    Stale {
        current: u64,
    },
}

impl Board {
    pub fn new(world: usize) -> Board {
        Board {
            current: Generation::first(world),
            asks: BTreeMap::new(),
            first_ask: None,
            decided: BTreeMap::new(),
        }
    }

    pub fn current(&self) -> &Generation {
        &self.current
    }

    /// Replica `id`, a member of generation `from` (or a replica joining, asking after the
    /// current one), asks for the generation after it, having completed `step` steps.
    /// Asking again is harmless; the decision, once made, is the answer for everyone.
    pub fn ask(
        &mut self,
        id: u32,
        from: u64,
        step: u64,
        connected: impl Fn(u32) -> bool,
        now: Instant,
        settle: Duration,
    ) -> Answer {
        if let Some(d) = self.decided.get(&(from + 1)) {
            return Answer::Decided(d.clone());
        }
        if from != self.current.number {
            return Answer::Stale {
                current: self.current.number,
            };
        }
        self.asks.insert(id, step);
        let first = *self.first_ask.get_or_insert(now);
        match decide(
            &self.current,
            &self.asks,
            connected,
            now.saturating_duration_since(first),
            settle,
        ) {
            Verdict::Wait { pending } => Answer::Wait { pending },
            Verdict::Decided(d) => {
                self.current = d.generation.clone();
                self.asks.clear();
                self.first_ask = None;
                self.decided.insert(d.generation.number, d.clone());
                Answer::Decided(d)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asks(v: &[(u32, u64)]) -> BTreeMap<u32, u64> {
        v.iter().copied().collect()
    }

    const SETTLE: Duration = Duration::from_secs(10);

    #[test]
    fn a_dead_replica_is_not_waited_for() {
        let g = Generation::first(4);
        let dead = |id| id != 1;
        let v = decide(&g, &asks(&[(0, 7), (2, 7)]), dead, Duration::ZERO, SETTLE);
        assert_eq!(v, Verdict::Wait { pending: vec![3] });
        let v = decide(
            &g,
            &asks(&[(0, 7), (2, 8), (3, 7)]),
            dead,
            Duration::ZERO,
            SETTLE,
        );
        let Verdict::Decided(d) = v else {
            panic!("{v:?}")
        };
        assert_eq!(d.generation.number, 1);
        assert_eq!(d.generation.members, vec![0, 2, 3]);
        assert_eq!(d.generation.rank_of(2), Some(1));
        assert_eq!(d.generation.rank_of(1), None);
        assert_eq!(d.steps, vec![7, 8, 7]);
        assert_eq!(d.left, vec![1]);
        assert!(d.joined.is_empty());
        // Replica 2 completed the step the others lost: its state is the one taken.
        assert_eq!(d.most_advanced(), (8, 1));
    }

    #[test]
    fn a_silent_replica_is_left_out_after_the_settle_time() {
        let g = Generation::first(3);
        let all = |_| true;
        let a = asks(&[(0, 3), (2, 3)]);
        assert_eq!(
            decide(&g, &a, all, SETTLE / 2, SETTLE),
            Verdict::Wait { pending: vec![1] }
        );
        let Verdict::Decided(d) = decide(&g, &a, all, SETTLE, SETTLE) else {
            panic!()
        };
        assert_eq!((d.generation.members, d.left), (vec![0, 2], vec![1]));
    }

    #[test]
    fn rank_0_leaving_makes_the_next_id_rank_0() {
        let g = Generation::first(4);
        let Verdict::Decided(d) = decide(
            &g,
            &asks(&[(1, 5), (2, 5), (3, 5)]),
            |id| id != 0,
            Duration::ZERO,
            SETTLE,
        ) else {
            panic!()
        };
        assert_eq!(d.generation.rank_of(1), Some(0));
        assert_eq!(d.left, vec![0]);
    }

    #[test]
    fn a_replica_asking_from_outside_joins() {
        let g = Generation {
            number: 2,
            members: vec![0, 2],
        };
        let Verdict::Decided(d) = decide(
            &g,
            &asks(&[(0, 9), (1, 0), (2, 9)]),
            |_| true,
            Duration::ZERO,
            SETTLE,
        ) else {
            panic!()
        };
        assert_eq!(d.generation.members, vec![0, 1, 2]);
        assert_eq!(d.joined, vec![1]);
        assert_eq!(d.most_advanced(), (9, 0));
    }

    #[test]
    fn nobody_asking_decides_nothing() {
        let g = Generation::first(2);
        let v = decide(&g, &BTreeMap::new(), |_| false, SETTLE * 2, SETTLE);
        assert_eq!(v, Verdict::Wait { pending: vec![] });
    }

    #[test]
    fn the_board_answers_late_askers_with_the_decision() {
        let t0 = Instant::now();
        let mut b = Board::new(3);
        let connected = |id: u32| id != 2;
        assert_eq!(
            b.ask(0, 0, 4, connected, t0, SETTLE),
            Answer::Wait { pending: vec![1] }
        );
        let Answer::Decided(d) = b.ask(1, 0, 4, connected, t0, SETTLE) else {
            panic!()
        };
        assert_eq!(d.generation.members, vec![0, 1]);
        assert_eq!(b.current().number, 1);
        // Replica 0 asks again (its wait had ended): the same decision.
        assert_eq!(b.ask(0, 0, 4, connected, t0, SETTLE), Answer::Decided(d));
        // Replica 2, stopped and excluded, wakes up and asks from generation 0: the decision
        // without it (it has left); from an unknown generation: stale.
        let Answer::Decided(late) = b.ask(2, 0, 3, |_| true, t0, SETTLE) else {
            panic!()
        };
        assert_eq!(late.generation.rank_of(2), None);
        assert_eq!(
            b.ask(2, 5, 3, |_| true, t0, SETTLE),
            Answer::Stale { current: 1 }
        );
        // The next loss starts a new round, timed from its own first ask.
        let later = t0 + SETTLE * 3;
        assert_eq!(
            b.ask(1, 1, 9, |_| true, later, SETTLE),
            Answer::Wait { pending: vec![0] }
        );
        let Answer::Decided(d2) = b.ask(1, 1, 9, |_| true, later + SETTLE, SETTLE) else {
            panic!()
        };
        assert_eq!((d2.generation.number, d2.generation.members), (2, vec![1]));
        assert_eq!(d2.left, vec![0]);
    }
}
