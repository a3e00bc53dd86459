//! The message of a failed collective, from every rank's [`Mark`]: who has not entered it, who
//! waits there, and what the missing ranks last completed. Pure: unit-tested without a group.

use std::time::Duration;

use super::Mark;
use crate::dist::wire::secs;

/// How the collective failed on this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Nothing moved for the group's timeout.
    Timeout,
    /// A peer's connection closed (its process ended or was killed).
    Lost,
}

/// Names the ranks that are behind collective `marks[me].current` and where they are, or `None`
/// when this rank is in no collective (nothing to explain). `still`: the ranks whose heartbeat
/// stood still; `waited`: how long this rank has been in it; `peer`: the rank this rank was
/// waiting for, when the transport knows.
pub fn explain(
    me: usize,
    marks: &[Option<Mark>],
    still: &[usize],
    waited: Duration,
    cause: Cause,
    peer: Option<usize>,
) -> Option<String> {
    let at = marks.get(me)?.as_ref()?.current.clone()?;
    let seq = at.seq;
    let mut behind = Vec::new();
    let mut waiting = Vec::new();
    let mut passed = Vec::new();
    let mut silent = Vec::new();
    for (r, mark) in marks.iter().enumerate() {
        match mark {
            None => silent.push(r),
            Some(m) if !m.entered(seq) => behind.push(r),
            Some(m) if m.current.as_ref().is_some_and(|c| c.seq == seq) => waiting.push(r),
            Some(_) => passed.push(r),
        }
    }
    let after = match cause {
        Cause::Timeout => format!("after {} s", secs_rounded(waited)),
        Cause::Lost => "and a connection closed (a process ended or was killed)".to_string(),
    };
    let mut parts = Vec::new();
    if !behind.is_empty() {
        parts.push(format!(
            "{} not entered {at} {after}",
            with_verb(&behind, "has", "have")
        ));
        if !waiting.is_empty() {
            parts.push(format!(
                "{} there",
                with_verb_among(&waiting, marks.len() - behind.len(), "waits", "wait")
            ));
        }
        for &r in &behind {
            let m = marks[r].as_ref().expect("behind ranks have marks");
            parts.push(match (&m.current, &m.last_done) {
                (Some(c), _) => format!("rank {r} is in {c}"),
                (None, Some(d)) => format!("rank {r} last completed #{}", d.seq),
                (None, None) => format!("rank {r} has completed no collective"),
            });
        }
        let frozen: Vec<usize> = behind
            .iter()
            .copied()
            .filter(|r| still.contains(r))
            .collect();
        if !frozen.is_empty() {
            parts.push(format!("{} {STOPPED}", with_verb(&frozen, "is", "are")));
        }
    } else if let (frozen @ [_, ..], []) = (
        &waiting
            .iter()
            .copied()
            .filter(|r| still.contains(r))
            .collect::<Vec<_>>()[..],
        &silent[..],
    ) {
        parts.push(format!(
            "{} {STOPPED}, inside {at}",
            with_verb(frozen, "is", "are")
        ));
        let others: Vec<usize> = waiting
            .iter()
            .copied()
            .filter(|r| !frozen.contains(r))
            .collect();
        if !others.is_empty() {
            parts.push(format!(
                "{} there {after}",
                with_verb_among(&others, marks.len() - frozen.len(), "waits", "wait")
            ));
        }
    } else if silent.is_empty() {
        let whom = peer.map(|p| format!(" at rank {p}")).unwrap_or_default();
        parts.push(match cause {
            Cause::Timeout => format!(
                "every rank entered {at}; it made no progress{whom} for {} s (a stopped process, \
                 or the network between ranks)",
                secs_rounded(waited)
            ),
            Cause::Lost => format!("every rank entered {at}; a connection closed{whom} during it"),
        });
    } else {
        parts.push(format!(
            "{} in {at} {after}",
            with_verb(&waiting, "waits", "wait")
        ));
    }
    if !passed.is_empty() {
        parts.push(format!(
            "{} completed it",
            with_verb(&passed, "has", "have")
        ));
    }
    if !silent.is_empty() {
        parts.push(format!(
            "{} left no ledger in the store (not started, or the store is gone)",
            with_verb(&silent, "has", "have")
        ));
    }
    Some(parts.join("; "))
}

/// What a rank whose heartbeat stood still is.
const STOPPED: &str = "not answering (a stopped process, or its host is down)";

/// Whole seconds for waits of a second or more.
fn secs_rounded(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        secs(Duration::from_secs(d.as_secs()))
    } else {
        secs(d)
    }
}

/// "rank 1", "ranks 0 and 2", "ranks 0, 2 and 5", "ranks 0, 1, 2, 3, 4, 5 and 10 more".
fn ranks(list: &[usize]) -> String {
    const SHOWN: usize = 6;
    match list {
        [one] => format!("rank {one}"),
        _ if list.len() > SHOWN + 1 => {
            let shown: Vec<String> = list[..SHOWN].iter().map(usize::to_string).collect();
            format!("ranks {} and {} more", shown.join(", "), list.len() - SHOWN)
        }
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(usize::to_string).collect();
            format!("ranks {} and {last}", init.join(", "))
        }
        [] => "no rank".to_string(),
    }
}

fn with_verb(list: &[usize], one: &str, many: &str) -> String {
    format!(
        "{} {}",
        ranks(list),
        if list.len() == 1 { one } else { many }
    )
}

/// [`with_verb`], saying "the other N ranks" when the list is everyone else (of `others`).
fn with_verb_among(list: &[usize], others: usize, one: &str, many: &str) -> String {
    if list.len() > 3 && list.len() == others {
        format!("the other {} ranks {many}", list.len())
    } else {
        with_verb(list, one, many)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::ledger::{Entry, Op};

    fn entry(seq: u64, bucket: Option<(usize, usize)>) -> Entry {
        Entry {
            seq,
            op: Op::AllReduce,
            bucket,
            bytes: 1 << 20,
        }
    }

    fn at(seq: u64, bucket: Option<(usize, usize)>) -> Option<Mark> {
        Some(Mark {
            beat: 0,
            current: Some(entry(seq, bucket)),
            last_done: Some(entry(seq - 1, None)),
        })
    }

    fn done(seq: u64) -> Option<Mark> {
        Some(Mark {
            beat: 0,
            current: None,
            last_done: Some(entry(seq, None)),
        })
    }

    const MINUTE: Duration = Duration::from_millis(60_400);

    #[test]
    fn a_rank_that_never_entered_is_named_with_where_it_stopped() {
        let marks = [at(1042, Some((2, 12))), done(1041), at(1042, Some((2, 12)))];
        for me in [0, 2] {
            assert_eq!(
                explain(me, &marks, &[], MINUTE, Cause::Timeout, Some(1)).unwrap(),
                "rank 1 has not entered all-reduce #1042 (bucket 3 of 12) after 60 s; \
                 ranks 0 and 2 wait there; rank 1 last completed #1041"
            );
        }
    }

    #[test]
    fn a_rank_still_in_an_earlier_collective_is_shown_there() {
        let marks = [at(7, None), at(6, Some((0, 2)))];
        assert_eq!(
            explain(0, &marks, &[], MINUTE, Cause::Lost, Some(1)).unwrap(),
            "rank 1 has not entered all-reduce #7 and a connection closed (a process ended or was \
             killed); rank 0 waits there; rank 1 is in all-reduce #6 (bucket 1 of 2)"
        );
    }

    #[test]
    fn a_stopped_rank_is_named_behind_or_inside() {
        let marks = [at(1042, Some((2, 12))), done(1041), at(1042, Some((2, 12)))];
        assert_eq!(
            explain(0, &marks, &[1], MINUTE, Cause::Timeout, Some(2)).unwrap(),
            "rank 1 has not entered all-reduce #1042 (bucket 3 of 12) after 60 s; \
             ranks 0 and 2 wait there; rank 1 last completed #1041; rank 1 is not answering \
             (a stopped process, or its host is down)"
        );
        let marks = [at(9, None), at(9, None), at(9, None)];
        assert_eq!(
            explain(0, &marks, &[1], MINUTE, Cause::Timeout, Some(2)).unwrap(),
            "rank 1 is not answering (a stopped process, or its host is down), inside \
             all-reduce #9; ranks 0 and 2 wait there after 60 s"
        );
    }

    #[test]
    fn everyone_inside_names_the_silent_link() {
        let marks = [at(5, None), at(5, None), at(5, None)];
        assert_eq!(
            explain(
                2,
                &marks,
                &[],
                Duration::from_millis(1500),
                Cause::Timeout,
                Some(1)
            )
            .unwrap(),
            "every rank entered all-reduce #5; it made no progress at rank 1 for 1 s (a stopped \
             process, or the network between ranks)"
        );
    }

    #[test]
    fn ranks_without_a_ledger_and_ranks_that_passed_are_said() {
        let marks = [at(5, None), None, done(5)];
        assert_eq!(
            explain(0, &marks, &[], MINUTE, Cause::Timeout, None).unwrap(),
            "rank 0 waits in all-reduce #5 after 60 s; rank 2 has completed it; rank 1 has \
             left no ledger in the store (not started, or the store is gone)"
        );
    }

    #[test]
    fn many_ranks_are_counted_not_listed() {
        let mut marks: Vec<Option<Mark>> = (0..12).map(|_| at(9, None)).collect();
        marks[3] = done(8);
        let msg = explain(0, &marks, &[], MINUTE, Cause::Timeout, Some(3)).unwrap();
        assert!(
            msg.starts_with(
                "rank 3 has not entered all-reduce #9 after 60 s; the other 11 ranks wait there"
            ),
            "{msg}"
        );
        assert_eq!(
            ranks(&[0, 1, 2, 4, 5, 6, 7, 8]),
            "ranks 0, 1, 2, 4, 5, 6 and 2 more"
        );
        assert_eq!(ranks(&[0, 2, 5]), "ranks 0, 2 and 5");
    }

    #[test]
    fn nothing_to_explain_outside_a_collective() {
        assert_eq!(
            explain(0, &[done(3), done(3)], &[], MINUTE, Cause::Timeout, None),
            None
        );
    }
}
