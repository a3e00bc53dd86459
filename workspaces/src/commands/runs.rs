//! The arguments of the commands that look at and manage runs: `ls`, `show`, `logs`, `stop`,
//! `resume`, `rm`, `tag`.

use std::path::Path;

use crate::filter::{SortKey, Where};
use crate::run_fields::RunFields;
use crate::{Result, Run, RunStatus};

/// One run, by any address a workspace resolves (`Workspace::run`).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct RunAddress {
    /// The run: its id, a unique prefix of it, `latest` or `EXPERIMENT@latest`.
    pub run: String,
}

/// `scale RUN --replicas N`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ScaleArgs {
    /// The run: its id, a unique prefix of it, `latest` or `EXPERIMENT@latest`.
    pub run: String,
    /// Replicas wanted, between the spec's ddp.elastic.min_replicas and ddp.replicas.
    #[arg(long)]
    pub replicas: usize,
}

/// Which runs `ls` lists: every condition given must hold.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct RunFilter {
    /// Only the runs of this experiment.
    #[arg(long)]
    pub experiment: Option<String>,
    /// Only the runs with this status.
    #[arg(long)]
    pub status: Option<RunStatus>,
    /// Only the runs of this sweep (id, unique id prefix, --name of the sweep, or `latest`).
    #[arg(long, value_name = "SWEEP")]
    pub sweep: Option<String>,
    /// Only the runs for which EXPR holds, e.g. 'spec.train.lr < 0.01 and status = "completed"'
    /// (fields: id, experiment, name, status, sweep, host, replicas, restarts, tags, created,
    /// val_loss, val_accuracy, test_loss, test_accuracy, perplexity, samples_per_sec, epoch,
    /// step, spec.KEY; and, or, not, parentheses).
    #[arg(long = "where", value_name = "EXPR")]
    pub where_: Option<Where>,
    /// Order by this field, ascending (`-FIELD`: descending); runs without it come last.
    #[arg(long, value_name = "FIELD", allow_hyphen_values = true)]
    pub sort: Option<SortKey>,
    /// At most N runs (after filtering and sorting).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

impl RunFilter {
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

/// `ls [--experiment E] [--status S] [--sweep SWEEP] [--where EXPR] [--sort FIELD] [--limit N]
/// [--json]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct LsArgs {
    #[command(flatten)]
    pub filter: RunFilter,
    /// The runs as JSON, one object per run.
    #[arg(long)]
    pub json: bool,
}

/// `show RUN [--json]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct ShowArgs {
    #[command(flatten)]
    pub run: RunAddress,
    /// The run as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `logs RUN [--rank R] [--tail N]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct LogsArgs {
    #[command(flatten)]
    pub run: RunAddress,
    /// Only this rank.
    #[arg(long, value_name = "R")]
    pub rank: Option<usize>,
    /// Only the last N lines of each log.
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

/// `tag RUN [TAG]... [--remove]`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Default)]
pub struct TagArgs {
    #[command(flatten)]
    pub run: RunAddress,
    /// Tags to add (or to remove with --remove).
    pub tags: Vec<String>,
    /// Remove the tags instead of adding them.
    #[arg(long)]
    pub remove: bool,
}
