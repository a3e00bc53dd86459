//! Live run cards: a card is shown once (`display_data` with a `display_id`) and then kept up to
//! date by a task that follows the run folder ([`Workspace::watch_with`]) and publishes
//! `update_display_data` at most twice a second while what it shows changes, until the run
//! reaches a final status. The task belongs to [`Cards`], which ends all of them at shutdown;
//! the run itself belongs to its supervisor and never depends on the kernel. A sweep's card is
//! kept live the same way, re-read from the workspace until the sweep is over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ddp_workspaces::files::tail::{LineTailer, TailFrom};
use ddp_workspaces::follow::events::{RunWatchOptions, TryNext};
use ddp_workspaces::{Run, RunEvent, WatchFrom, Workspace};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::Result;
use crate::output::Out;
use crate::render::Output;
use crate::render::card::Card;

/// At most this often a card is re-published.
pub const UPDATE_INTERVAL: Duration = Duration::from_millis(500);
/// After a final status, how long late lines (the test record, last log lines) may still come.
const SETTLE: Duration = Duration::from_millis(400);
/// Log lines read back per rank when a card opens.
const LOG_BACKLOG: usize = 8;

/// The owner of every live card's task.
pub struct Cards {
    runtime: Handle,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

/// A card being kept live.
pub struct LiveCard {
    pub display_id: String,
    pub run_id: String,
    done: Arc<AtomicBool>,
}

impl LiveCard {
    /// Whether the run reached a final status and the card shows it.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }
}

impl Cards {
    pub fn new(runtime: Handle, shutdown: CancellationToken) -> Cards {
        Cards {
            runtime,
            tasks: TaskTracker::new(),
            shutdown,
        }
    }

    /// Shows `run`'s card in `out`'s cell now and keeps it live in the background.
    pub fn show(&self, ws_root: &std::path::Path, run: &Run, out: &Out) -> LiveCard {
        let display_id = format!(
            "ddp-run-{}-{}",
            run.record.id,
            uuid::Uuid::new_v4().simple()
        );
        let snapshot = snapshot(run);
        let shown = snapshot.render();
        out.display(&shown, Some(&display_id));
        let done = Arc::new(AtomicBool::new(snapshot.is_final()));
        let live = LiveCard {
            display_id: display_id.clone(),
            run_id: run.record.id.clone(),
            done: done.clone(),
        };
        if snapshot.is_final() {
            // Everything a finished run's card shows is on disk already.
            return live;
        }
        let card = Card::new(run);
        let ws = Workspace {
            root: ws_root.to_path_buf(),
        };
        let run = run.clone();
        let out = out.clone();
        let stop = self.shutdown.clone();
        let _guard = self.runtime.enter();
        self.tasks.spawn_on(
            async move {
                follow(ws, run, card, shown, out, display_id, stop).await;
                done.store(true, Ordering::SeqCst);
            },
            &self.runtime,
        );
        live
    }

    /// Shows sweep `id`'s card in `out`'s cell now and keeps it live (re-read every
    /// [`UPDATE_INTERVAL`]) until the sweep is over. Returns the display id.
    pub fn show_sweep(&self, ws_root: &std::path::Path, id: &str, out: &Out) -> Result<String> {
        let display_id = format!("ddp-sweep-{id}-{}", uuid::Uuid::new_v4().simple());
        let (shown, done) = sweep_card(ws_root, id)?;
        out.display(&shown, Some(&display_id));
        if done {
            return Ok(display_id);
        }
        let (root, id, out, stop) = (
            ws_root.to_path_buf(),
            id.to_string(),
            out.clone(),
            self.shutdown.clone(),
        );
        let shown_id = display_id.clone();
        let _guard = self.runtime.enter();
        self.tasks.spawn_on(
            async move {
                let mut shown = shown;
                let mut tick = tokio::time::interval(UPDATE_INTERVAL);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => {}
                    }
                    let Ok((now, done)) = sweep_card(&root, &id) else {
                        continue;
                    };
                    if now != shown {
                        out.update(&now, &shown_id);
                        shown = now;
                    }
                    if done {
                        return;
                    }
                }
            },
            &self.runtime,
        );
        Ok(display_id)
    }

    /// Ends every card task (kernel shutdown) and waits for them, at most `limit`.
    pub async fn close(&self, limit: Duration) {
        self.tasks.close();
        let _ = tokio::time::timeout(limit, self.tasks.wait()).await;
    }
}

/// Sweep `id`'s card as the workspace says now, and whether the sweep is over.
fn sweep_card(root: &std::path::Path, id: &str) -> Result<(Output, bool)> {
    let record = ddp_workspaces::sweep::SweepRecord::load(root, id)?;
    let ws = Workspace {
        root: root.to_path_buf(),
    };
    let (all, _) = ws.runs()?;
    let runs = ddp_workspaces::sweep::members(root, &all, id);
    let driver = ddp_workspaces::actions::search::driver_pid(root, id)?;
    let done = crate::render::sweep::is_final(&record, &runs);
    Ok((crate::render::sweep::card(&record, &runs, driver)?, done))
}

/// The card of `run` as its folder says now: the record, rank 0's metrics, the last log lines
/// of each rank.
pub fn snapshot(run: &Run) -> Card {
    let mut card = Card::new(run);
    for record in run.metrics().unwrap_or_default() {
        card.apply(&RunEvent::Metric(record));
    }
    for rank in 0..run.record.replicas.max(1) {
        let mut tail = LineTailer::new(run.log_path(rank), TailFrom::LastLines(LOG_BACKLOG));
        for line in tail.poll().unwrap_or_default() {
            card.apply(&RunEvent::Log {
                rank: Some(rank),
                line,
            });
        }
    }
    card
}

async fn follow(
    ws: Workspace,
    run: Run,
    mut card: Card,
    // What the cell shows so far (the snapshot): published again only once the card differs.
    mut shown: Output,
    out: Out,
    display_id: String,
    stop: CancellationToken,
) {
    let options = RunWatchOptions {
        log_backlog: Some(LOG_BACKLOG),
        ..RunWatchOptions::default()
    };
    let mut watch = ws.watch_with(&run, WatchFrom::Start, options);
    let mut last_publish = Instant::now();
    let mut final_since: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        // Take everything that is ready, then decide once.
        let mut ended = false;
        loop {
            match watch.try_next() {
                TryNext::Event(e) => {
                    card.apply(&e);
                }
                TryNext::Empty => break,
                TryNext::Ended => {
                    ended = true;
                    break;
                }
            }
        }
        if card.is_final() {
            final_since.get_or_insert_with(Instant::now);
        }
        let settled = final_since.is_some_and(|t| t.elapsed() >= SETTLE);
        if (last_publish.elapsed() >= UPDATE_INTERVAL || settled) && !stop.is_cancelled() {
            let now = card.render();
            if now != shown {
                out.update(&now, &display_id);
                shown = now;
                last_publish = Instant::now();
            }
        }
        if settled || ended {
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            event = watch.next() => match event {
                Some(e) => { card.apply(&e); }
                None => return,
            },
            _ = tick.tick() => {}
        }
    }
}
