//! [`BlockingRunWatch`]: a [`RunWatch`] for plain, non-async code (the `ddp` command line), with
//! its own small runtime and a bounded wait for the next event.

use std::time::Duration;

use super::{RunEvent, RunWatch, RunWatchOptions, WatchFrom};
use crate::runs::run::Run;
use crate::{Error, Result, Workspace};

/// A run followed from plain code: the same events as [`RunWatch`] (the watcher the dashboard
/// and the notebook use), taken one at a time with a time limit.
pub struct BlockingRunWatch {
    // Declared first so that the watch's tasks are told to stop before the runtime goes.
    watch: RunWatch,
    runtime: tokio::runtime::Runtime,
}

/// What [`BlockingRunWatch::next_within`] found.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// The next event.
    Event(RunEvent),
    /// Nothing arrived within the time given.
    Quiet,
    /// The watch is over and drained.
    Ended,
}

impl Workspace {
    /// Follows `run` from plain code (see [`Workspace::watch_with`] for what is delivered).
    pub fn watch_blocking(
        &self,
        run: &Run,
        from: WatchFrom,
        options: RunWatchOptions,
    ) -> Result<BlockingRunWatch> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ddp-watch")
            .enable_all()
            .build()
            .map_err(|e| Error::Invalid(format!("cannot start the watcher's runtime: {e}")))?;
        let watch = {
            let _guard = runtime.enter();
            self.watch_with(run, from, options)
        };
        Ok(BlockingRunWatch { watch, runtime })
    }
}

impl BlockingRunWatch {
    /// The next event, waiting at most `limit` for it.
    pub fn next_within(&mut self, limit: Duration) -> Next {
        let watch = &mut self.watch;
        match self
            .runtime
            .block_on(async { tokio::time::timeout(limit, watch.next()).await })
        {
            Ok(Some(e)) => Next::Event(e),
            Ok(None) => Next::Ended,
            Err(_) => Next::Quiet,
        }
    }

    /// How long a follower waits, once the run has ended, for the last lines of its files: two
    /// rescans of the file watcher, which deliver whatever `notify` missed.
    pub fn settle_time(&self) -> Duration {
        crate::files::watch::WatchOptions::default().rescan_interval * 2
    }
}
