//! Which runs a listing picks ([`RunSelection`]): an experiment, a status, a sweep, a `--where`
//! expression, a sort field and a limit, every condition given holding. `ddp ls`, `%ddp ls` and
//! the run index take it; the command line's `RunFilter` (`commands`) becomes one.

use std::path::Path;

use crate::index::fields::RunFields;
use crate::index::filter::{SortKey, Where};
use crate::{Result, Run, RunStatus};

/// Which runs a listing picks: every condition given must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunSelection {
    /// Only the runs of this experiment.
    pub experiment: Option<String>,
    /// Only the runs with this status.
    pub status: Option<RunStatus>,
    /// Only the runs of this sweep (id, unique id prefix, a sweep's name, or `latest`).
    pub sweep: Option<String>,
    /// Only the runs for which this expression holds.
    pub where_: Option<Where>,
    /// Ordered by this field (runs without it last); else in the listing's order.
    pub sort: Option<SortKey>,
    /// At most this many runs, after filtering and sorting.
    pub limit: Option<usize>,
}

impl RunSelection {
    /// The runs of `runs` (of the workspace at `root`) that pass, in their order; an unknown
    /// sweep is an error ([`crate::sweep::resolve`]).
    pub fn select<'a>(&self, root: &Path, runs: &'a [Run]) -> Result<Vec<&'a Run>> {
        let sweep = self
            .sweep
            .as_deref()
            .map(|s| crate::sweep::resolve(root, crate::sweep::sweeps_of(runs), s))
            .transpose()?;
        let mut picked: Vec<(&Run, RunFields)> = runs
            .iter()
            .filter(|r| sweep.is_none() || r.record.sweep == sweep)
            .filter(|r| {
                self.experiment
                    .as_deref()
                    .is_none_or(|e| r.record.experiment == e)
            })
            .filter(|r| self.status.is_none_or(|s| r.record.status == s))
            .map(|r| (r, RunFields::new(r)))
            .filter(|(_, f)| {
                self.where_
                    .as_ref()
                    .is_none_or(|w| w.expr.matches(&|name| f.get(name)))
            })
            .collect();
        if let Some(key) = &self.sort {
            let mut keyed: Vec<_> = picked
                .into_iter()
                .map(|(r, f)| (f.get(&key.field), r, f))
                .collect();
            // Stable: runs with equal values keep the listing's order.
            keyed.sort_by(|a, b| key.order(a.0.as_ref(), b.0.as_ref()));
            picked = keyed.into_iter().map(|(_, r, f)| (r, f)).collect();
        }
        picked.truncate(self.limit.unwrap_or(usize::MAX));
        Ok(picked.into_iter().map(|(r, _)| r).collect())
    }
}
