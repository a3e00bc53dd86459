//! When local steps sync (a pure policy): the synchronous warm-up steps, the step at which each
//! fragment's sync begins, the steps its values travel during, and the step it lands; and how
//! the flat parameters are cut into fragments.
//!
//! Steps are counted from 1 (`t`: the step being taken). After `warmup` synchronous steps the
//! local steps begin, counted `u = t - warmup`. Fragment `p` of `F` begins its sync at the end
//! of every step with `u % H == offset(p)`, `offset(p) = ((p + 1) * H / F) % H`, so with one
//! fragment every `H`-th local step syncs the whole model; its values travel during the next
//! `delay` steps, slice `k` during the `k`-th, and land (are applied) at the end of the last of
//! them (with no delay, at the end of the step it began in).

use std::ops::Range;

/// What a step does besides its own optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Actions {
    /// A synchronous step: the gradients averaged, as DDP.
    pub synchronous: bool,
    /// Slice `k` of fragment `p`'s values travels during this step (`(p, k)`).
    pub sends: Option<(usize, usize)>,
    /// Fragment `p`'s averaged values land at the end of this step.
    pub lands: Option<usize>,
    /// Fragment `p`'s sync begins at the end of this step (after what lands).
    pub begins: Option<usize>,
}

/// The schedule of a run's syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub every: u64,
    pub warmup: u64,
    pub fragments: usize,
    pub delay: u64,
}

impl Plan {
    fn offset(&self, p: usize) -> u64 {
        ((p as u64 + 1) * self.every / self.fragments as u64) % self.every
    }

    /// The fragment whose sync begins at the end of step `t`.
    fn begin_at(&self, t: u64) -> Option<usize> {
        if t <= self.warmup {
            return None;
        }
        let u = (t - self.warmup) % self.every;
        (0..self.fragments).find(|p| self.offset(*p) == u)
    }

    /// What step `t` (from 1) does.
    pub(crate) fn at(&self, t: u64) -> Actions {
        let began = |back: u64| t.checked_sub(back).and_then(|s| self.begin_at(s));
        let sends = (1..=self.delay).find_map(|back| began(back).map(|p| (p, (back - 1) as usize)));
        Actions {
            synchronous: t <= self.warmup,
            sends,
            lands: began(self.delay),
            begins: self.begin_at(t),
        }
    }
}

/// The flat parameters `slots` (each a parameter's range, in order, together covering
/// `0..total`) cut into `f` contiguous fragments at parameter boundaries, as even in size as the
/// parameters allow; `None` where there are fewer parameters than fragments.
pub(crate) fn fragments(slots: &[Range<usize>], f: usize) -> Option<Vec<Range<usize>>> {
    if f == 0 || slots.len() < f {
        return None;
    }
    let total = slots.last().map_or(0, |s| s.end);
    let mut out = Vec::with_capacity(f);
    let mut start = 0;
    let mut i = 0;
    for k in 1..f {
        let target = total * k / f;
        // Take parameters while this fragment is short of its target, leaving one for each
        // fragment after it.
        let mut end = i;
        loop {
            end += 1;
            let left = slots.len() - end;
            if slots[end - 1].end >= target || left == f - k {
                break;
            }
        }
        out.push(start..slots[end - 1].end);
        start = slots[end - 1].end;
        i = end;
    }
    out.push(start..total);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(every: u64, warmup: u64, fragments: usize, delay: u64) -> Plan {
        Plan {
            every,
            warmup,
            fragments,
            delay,
        }
    }

    #[test]
    fn one_fragment_syncs_every_h_local_steps_after_the_warm_up() {
        let p = plan(4, 2, 1, 0);
        let begins: Vec<u64> = (1..=14).filter(|t| p.at(*t).begins.is_some()).collect();
        assert_eq!(begins, vec![6, 10, 14]);
        assert!(p.at(1).synchronous && p.at(2).synchronous && !p.at(3).synchronous);
        // No delay: a sync lands where it begins and nothing travels between steps.
        assert!((1..=14).all(|t| p.at(t).lands == p.at(t).begins && p.at(t).sends.is_none()));
    }

    #[test]
    fn every_step_averaging_syncs_at_every_step() {
        let p = plan(1, 0, 1, 0);
        assert!((1..=5).all(|t| p.at(t).begins == Some(0) && p.at(t).lands == Some(0)));
    }

    #[test]
    fn fragments_take_turns_and_travel_during_the_steps_after_they_begin() {
        let p = plan(8, 0, 2, 2);
        let a: Vec<(u64, Actions)> = (1..=17).map(|t| (t, p.at(t))).collect();
        let begins: Vec<(u64, usize)> = a
            .iter()
            .filter_map(|(t, x)| x.begins.map(|f| (*t, f)))
            .collect();
        assert_eq!(begins, vec![(4, 0), (8, 1), (12, 0), (16, 1)]);
        let sends: Vec<(u64, (usize, usize))> = a
            .iter()
            .filter_map(|(t, x)| x.sends.map(|s| (*t, s)))
            .collect();
        assert_eq!(
            sends,
            vec![
                (5, (0, 0)),
                (6, (0, 1)),
                (9, (1, 0)),
                (10, (1, 1)),
                (13, (0, 0)),
                (14, (0, 1)),
                (17, (1, 0))
            ]
        );
        let lands: Vec<(u64, usize)> = a
            .iter()
            .filter_map(|(t, x)| x.lands.map(|f| (*t, f)))
            .collect();
        assert_eq!(lands, vec![(6, 0), (10, 1), (14, 0)]);
        // Uneven splits keep at least every / fragments steps between two fragments.
        let p = plan(8, 0, 3, 0);
        let begins: Vec<u64> = (1..=8).filter(|t| p.at(*t).begins.is_some()).collect();
        assert_eq!(begins, vec![2, 5, 8]);
    }

    #[test]
    fn fragments_are_cut_at_parameter_boundaries_evenly() {
        let slots = [0..10, 10..20, 20..21, 21..40, 40..41];
        let whole: Range<usize> = 0..41;
        assert_eq!(fragments(&slots, 1), Some(vec![whole]));
        assert_eq!(fragments(&slots, 2), Some(vec![0..20, 20..41]));
        assert_eq!(
            fragments(&slots, 5),
            Some(vec![0..10, 10..20, 20..21, 21..40, 40..41])
        );
        // A large first parameter leaves one parameter for each fragment after it.
        let slots = [0..100, 100..101, 101..102];
        assert_eq!(fragments(&slots, 3), Some(vec![0..100, 100..101, 101..102]));
        assert_eq!(fragments(&slots, 4), None);
    }
}
