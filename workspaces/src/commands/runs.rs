//! The arguments of the commands that look at and manage runs: `ls`, `show`, `logs`, `stop`,
//! `resume`, `rm`, `tag`.

use crate::RunStatus;
use crate::index::filter::{SortKey, Where};
use crate::index::selection::RunSelection;

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

/// Which runs `ls` lists: every condition given must hold ([`RunFilter::selection`]).
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
    /// The selection these options ask for.
    pub fn selection(&self) -> RunSelection {
        let RunFilter {
            experiment,
            status,
            sweep,
            where_,
            sort,
            limit,
        } = self.clone();
        RunSelection {
            experiment,
            status,
            sweep,
            where_,
            sort,
            limit,
        }
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
