//! Elastic membership: which replicas form a group's next generation once one is lost or one
//! joins.
//!
//! A replica keeps the identity it started with (its first rank, `id`). Generation 0 is every
//! replica of the launch; a replica that loses its ring, or is told at a step boundary that the
//! group re-forms, asks the store for the generation after its own, saying the last step it
//! completed. A replica joining (restarted, or added by `ddp scale`) asks for the generation
//! after the current one, whatever it is ([`JOIN`]). The store sees every replica's connection,
//! so it decides: the next generation is the replicas that asked, once every member of the
//! current generation that is still connected has asked, or once `settle` has passed since the
//! first member asked (a stopped process keeps its connection and never asks). Joiners alone
//! decide nothing: they wait for the members. Ranks of the new generation follow the ids. The
//! members that did not ask have left; the replicas that joined are new, or came back (a
//! restarted replica is listed as both).
//!
//! Pure policy ([`decide`], [`Board`]): the store's server holds a [`Board`] and answers each
//! ask with the [`NextGeneration`] once there is one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The generation a joining replica asks to follow: whichever is current.
pub const JOIN: u64 = u64::MAX;

/// The store key under which the store announces a joiner: the number of the generation it
/// waits to follow. The members' rank 0 looks at it between steps and has the group re-form.
pub const JOIN_KEY: &str = "elastic/join";

/// The store key every replica of an elastic group adds one to as it connects: a count past the
/// world size means the group formed before, and the replica started again (a restarted pod,
/// container or node) joins it instead of starting a new one.
pub const STARTED_KEY: &str = "elastic/started";

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
pub struct NextGeneration {
    pub generation: Generation,
    /// The last step each member completed, in member order (a joiner's counts nothing).
    pub steps: Vec<u64>,
    /// Members of the previous generation that are not members of this one, or came back.
    pub left: Vec<u32>,
    /// Members of this generation that were not members of the previous one, or came back.
    pub joined: Vec<u32>,
}

impl NextGeneration {
    /// The most steps any continuing member completed, and the rank of the first that did: the
    /// replica whose state the others take (a step that some completed and others lost mid-way;
    /// a joiner's state is never taken).
    pub fn most_advanced(&self) -> (u64, usize) {
        let carried = |r: &usize| !self.joined.contains(&self.generation.members[*r]);
        let ranks = || (0..self.steps.len()).filter(carried);
        let best = ranks().map(|r| self.steps[r]).max().unwrap_or(0);
        let rank = ranks().find(|&r| self.steps[r] == best).unwrap_or(0);
        (best, rank)
    }

    /// Replicas in the generation before this one.
    pub fn world_before(&self) -> usize {
        self.generation.members.len() + self.left.len() - self.joined.len()
    }
}

/// One replica's ask for the next generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// The last step it completed.
    pub step: u64,
    /// It joins (restarted or added), holding no state of the group.
    pub joining: bool,
}

impl Ask {
    pub fn member(step: u64) -> Ask {
        Ask {
            step,
            joining: false,
        }
    }

    pub fn joiner() -> Ask {
        Ask {
            step: 0,
            joining: true,
        }
    }
}

/// What the store answers an ask with, for now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Members still connected that have not asked yet.
    Wait {
        pending: Vec<u32>,
    },
    Decided(NextGeneration),
}

/// Decides the generation after `current` from the asks so far (`asks`: id → its ask), whether
/// each id still has a connection to the store (`connected`), and the time since the first
/// member asked.
pub fn decide(
    current: &Generation,
    asks: &BTreeMap<u32, Ask>,
    connected: impl Fn(u32) -> bool,
    waited: Duration,
    settle: Duration,
) -> Verdict {
    let carried = |id: &u32| asks.get(id).is_some_and(|a| !a.joining);
    let pending: Vec<u32> = current
        .members
        .iter()
        .copied()
        .filter(|id| !asks.contains_key(id) && connected(*id))
        .collect();
    let members_asked = current.members.iter().any(carried);
    if !members_asked || (!pending.is_empty() && waited < settle) {
        return Verdict::Wait { pending };
    }
    let members: Vec<u32> = asks.keys().copied().collect();
    let left = current
        .members
        .iter()
        .copied()
        .filter(|id| !carried(id))
        .collect();
    let joined = members
        .iter()
        .copied()
        .filter(|id| asks[id].joining || current.members.binary_search(id).is_err())
        .collect();
    Verdict::Decided(NextGeneration {
        generation: Generation {
            number: current.number + 1,
            members,
        },
        steps: asks.values().map(|a| a.step).collect(),
        left,
        joined,
    })
}

/// The store's record of a group's generations: the current one, the asks for the next, and
/// the decisions made (a slow replica asking for a decided generation gets the decision).
#[derive(Debug, Clone)]
pub struct Board {
    current: Generation,
    asks: BTreeMap<u32, Ask>,
    /// When the first member asked (joiners start no clock).
    first_ask: Option<Instant>,
    decided: BTreeMap<u64, NextGeneration>,
}

/// The answer to one ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Decided(NextGeneration),
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

    /// Whether a replica waits to join the current generation's successor.
    pub fn joiner_waiting(&self) -> bool {
        self.asks.values().any(|a| a.joining)
    }

    /// Replica `id` asks for the generation after `from` (a member of it, or a joiner that
    /// took `from` as the current one when it first asked). Asking again is harmless; the
    /// decision, once made, is the answer for everyone.
    pub fn ask(
        &mut self,
        id: u32,
        from: u64,
        ask: Ask,
        connected: impl Fn(u32) -> bool,
        now: Instant,
        settle: Duration,
    ) -> Answer {
        if let Some(d) = from.checked_add(1).and_then(|n| self.decided.get(&n)) {
            return Answer::Decided(d.clone());
        }
        if from != self.current.number {
            return Answer::Stale {
                current: self.current.number,
            };
        }
        self.asks.insert(id, ask);
        if !ask.joining && self.current.members.contains(&id) {
            self.first_ask.get_or_insert(now);
        }
        let waited = self
            .first_ask
            .map_or(Duration::ZERO, |first| now.saturating_duration_since(first));
        match decide(&self.current, &self.asks, connected, waited, settle) {
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

    fn asks(v: &[(u32, u64)]) -> BTreeMap<u32, Ask> {
        v.iter()
            .map(|&(id, step)| (id, Ask::member(step)))
            .collect()
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
        let mut a = asks(&[(0, 9), (2, 9)]);
        a.insert(1, Ask::joiner());
        let Verdict::Decided(d) = decide(&g, &a, |_| true, Duration::ZERO, SETTLE) else {
            panic!()
        };
        assert_eq!(d.generation.members, vec![0, 1, 2]);
        assert_eq!(d.joined, vec![1]);
        assert_eq!(d.most_advanced(), (9, 0));
        assert_eq!(d.world_before(), 2);
        // A joiner alone decides nothing, however long it waits.
        let alone: BTreeMap<u32, Ask> = [(1, Ask::joiner())].into();
        assert_eq!(
            decide(&g, &alone, |_| true, SETTLE * 9, SETTLE),
            Verdict::Wait {
                pending: vec![0, 2]
            }
        );
    }

    #[test]
    fn a_restarted_member_comes_back_and_never_gives_its_state() {
        // Replica 0 died and was restarted before the others noticed: it asks as a joiner
        // while still a member of generation 3. It is listed as left and joined, and the
        // state comes from rank 1 although replica 0 is rank 0.
        let g = Generation {
            number: 3,
            members: vec![0, 1, 2],
        };
        let mut a = asks(&[(1, 20), (2, 20)]);
        a.insert(0, Ask::joiner());
        let Verdict::Decided(d) = decide(&g, &a, |_| true, Duration::ZERO, SETTLE) else {
            panic!()
        };
        assert_eq!(d.generation.members, vec![0, 1, 2]);
        assert_eq!((d.left.clone(), d.joined.clone()), (vec![0], vec![0]));
        assert_eq!(d.most_advanced(), (20, 1));
        assert_eq!(d.world_before(), 3);
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
        let m = Ask::member;
        assert_eq!(
            b.ask(0, 0, m(4), connected, t0, SETTLE),
            Answer::Wait { pending: vec![1] }
        );
        let Answer::Decided(d) = b.ask(1, 0, m(4), connected, t0, SETTLE) else {
            panic!()
        };
        assert_eq!(d.generation.members, vec![0, 1]);
        assert_eq!(b.current().number, 1);
        // Replica 0 asks again (its wait had ended): the same decision.
        assert_eq!(b.ask(0, 0, m(4), connected, t0, SETTLE), Answer::Decided(d));
        // Replica 2, stopped and excluded, wakes up and asks from generation 0: the decision
        // without it (it has left); from an unknown generation: stale.
        let Answer::Decided(late) = b.ask(2, 0, m(3), |_| true, t0, SETTLE) else {
            panic!()
        };
        assert_eq!(late.generation.rank_of(2), None);
        assert_eq!(
            b.ask(2, 5, m(3), |_| true, t0, SETTLE),
            Answer::Stale { current: 1 }
        );
        // The next loss starts a new round, timed from its own first ask.
        let later = t0 + SETTLE * 3;
        assert_eq!(
            b.ask(1, 1, m(9), |_| true, later, SETTLE),
            Answer::Wait { pending: vec![0] }
        );
        let Answer::Decided(d2) = b.ask(1, 1, m(9), |_| true, later + SETTLE, SETTLE) else {
            panic!()
        };
        assert_eq!((d2.generation.number, d2.generation.members), (2, vec![1]));
        assert_eq!(d2.left, vec![0]);
        // A joiner waits without starting the clock; the member that asks then decides.
        assert_eq!(
            b.ask(0, 2, Ask::joiner(), |_| true, later, SETTLE),
            Answer::Wait { pending: vec![1] }
        );
        assert!(b.joiner_waiting());
        let Answer::Decided(d3) = b.ask(1, 2, m(12), |_| true, later + SETTLE * 5, SETTLE) else {
            panic!()
        };
        assert_eq!((d3.generation.members, d3.joined), (vec![0, 1], vec![0]));
        assert!(!b.joiner_waiting());
        // The joiner's next look finds the decision for the generation it asked to follow.
        assert!(matches!(
            b.ask(0, 2, Ask::joiner(), |_| true, later, SETTLE),
            Answer::Decided(_)
        ));
    }
}
