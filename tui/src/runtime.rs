//! The runtime: the terminal, the producers and the one loop.
//!
//! Producers never draw: the run-list watch, run watches and the telemetry sampler send
//! [`Msg`]s into one channel. The loop `select!`s over terminal input, that channel, a tick and
//! the termination signals; it hands each message to [`App::update`], carries out the returned
//! [`Effect`]s through the [`Executor`] (blocking work on tokio's blocking pool, never on the UI
//! thread), and redraws when something changed, at most every [`FRAME`].
//!
//! Every task has an owner: run watches are aborted when their run is closed (dropping a
//! `RunWatch` stops its tasks), a text generation stops when its run is closed or another one
//! starts, the telemetry thread and the run-list watch end when the loop's [`Executor`] is
//! dropped, and the terminal is restored on quit, on SIGTERM/SIGHUP and on panic.

use std::collections::BTreeMap;
use std::io::Stdout;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::views::sweep::SweepRequest;
use anyhow::{Context as _, Result};
use crossterm::event::{DisableMouseCapture, EnableMouseCapture, Event, EventStream, KeyEventKind};
use crossterm::execute;
use ddp_workspaces::actions::NewRun;
use ddp_workspaces::actions::{self, StopRequest};
use ddp_workspaces::commands::{self, SampleOptions};
use ddp_workspaces::engine::devices::telemetry::{ProcessOwners, TelemetrySampler, process_owners};
use ddp_workspaces::follow::events::RunWatchOptions;
use ddp_workspaces::index::Index;
use ddp_workspaces::present::sample::Sampler;
use ddp_workspaces::sweep::SweepRecord;
use ddp_workspaces::{Run, WatchFrom, Workspace};
use futures_util::StreamExt;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::app::{App, Effect, Msg, Outcome};
use crate::theme::Theme;
use crate::views::run::LOG_BACKLOG;
use crate::views::run::sample::SampleEvent;

/// The shortest time between two frames.
pub const FRAME: Duration = Duration::from_millis(16);
/// The clock tick (durations, notices) and the telemetry period.
pub const TICK: Duration = Duration::from_secs(1);
/// Messages buffered from producers before they wait for the UI.
const CHANNEL: usize = 16_384;

type Term = Terminal<CrosstermBackend<Stdout>>;

/// Unix time in seconds.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs the dashboard on the terminal until the user quits (or a signal says so).
pub async fn run(workspace: PathBuf) -> Result<()> {
    install_panic_hook();
    let mut terminal = ratatui::init();
    let _ = execute!(std::io::stdout(), EnableMouseCapture);
    let result = event_loop(&mut terminal, workspace).await;
    let _ = execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();
    result
}

/// Mouse capture is ours to undo on panic (ratatui's own hook, installed after this one,
/// restores raw mode and the screen and then calls this).
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = execute!(std::io::stdout(), DisableMouseCapture);
        previous(info);
    }));
}

async fn event_loop(terminal: &mut Term, workspace: PathBuf) -> Result<()> {
    let size = terminal.size().context("reading the terminal size")?;
    let mut app = App::new(
        workspace.clone(),
        Theme::from_env(),
        now(),
        (size.width, size.height),
    );
    let (tx, mut rx) = mpsc::channel(CHANNEL);
    let mut exec = Executor::start(workspace, tx);
    let mut input = EventStream::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sighup = signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    loop {
        if dirty && last_draw.elapsed() >= FRAME {
            terminal.draw(|f| f.render_widget(&app, f.area()))?;
            last_draw = Instant::now();
            dirty = false;
        }
        let next_frame = tokio::time::Instant::from_std(last_draw + FRAME);
        let first = tokio::select! {
            ev = input.next() => match ev {
                Some(Ok(e)) => input_msg(e),
                // The terminal is gone: nothing more to show.
                Some(Err(_)) | None => Some(Msg::Quit),
            },
            Some(m) = rx.recv() => Some(m),
            _ = tick.tick() => Some(Msg::Tick(now())),
            _ = sigterm.recv() => Some(Msg::Quit),
            _ = sighup.recv() => Some(Msg::Quit),
            _ = sigint.recv() => Some(Msg::Quit),
            _ = tokio::time::sleep_until(next_frame), if dirty => None,
        };
        let mut batch: Vec<Msg> = first.into_iter().collect();
        while batch.len() < CHANNEL {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let mut list_changed = false;
        for msg in batch {
            list_changed |= matches!(msg, Msg::RunList(_));
            dirty |= match &msg {
                // Telemetry only shows in the Devices view.
                Msg::Telemetry(_) => app.view == crate::app::View::Devices,
                // The clock shows in live durations and ages out notices.
                Msg::Tick(_) => app.shows_time(),
                _ => true,
            };
            for effect in app.update(msg) {
                match effect {
                    Effect::EditNotes(run) => {
                        input = edit_notes(terminal, input, &run, &exec.tx)?;
                        dirty = true;
                    }
                    other => exec.execute(other),
                }
            }
        }
        if list_changed {
            // Only runs that are not over own processes: the others are not copied.
            let runs: Vec<Run> = app
                .runs
                .entries
                .iter()
                .filter(|e| !e.run.record.status.is_terminal())
                .map(|e| e.run.clone())
                .collect();
            exec.set_owners(process_owners(&runs));
        }
        if app.should_quit {
            return Ok(());
        }
    }
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).context("installing a signal handler")
}

fn input_msg(e: Event) -> Option<Msg> {
    match e {
        Event::Key(k) if k.kind != KeyEventKind::Release => Some(Msg::Key(k)),
        Event::Mouse(m) => Some(Msg::Mouse(m)),
        Event::Resize(w, h) => Some(Msg::Resize(w, h)),
        _ => None,
    }
}

/// Suspends the dashboard, runs `$VISUAL`/`$EDITOR` (else `vi`) on the run's notes, and comes
/// back. The input stream is dropped first so that the editor gets every key.
fn edit_notes(
    terminal: &mut Term,
    input: EventStream,
    run: &Run,
    tx: &mpsc::Sender<Msg>,
) -> Result<EventStream> {
    drop(input);
    let path = run.dir.join(ddp_workspaces::runs::run::NOTES);
    let editor = std::env::var("VISUAL")
        .ok()
        .or_else(|| std::env::var("EDITOR").ok())
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "vi".into());
    let _ = execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();
    let words = commands::split(&editor).unwrap_or_else(|_| vec![editor.clone()]);
    let outcome = match words.split_first() {
        Some((program, args)) => match std::process::Command::new(program)
            .args(args)
            .arg(&path)
            .status()
        {
            Ok(s) if s.success() => Outcome::NotesEdited(run.record.id.clone()),
            Ok(s) => Outcome::Failed(format!("{editor} {}: {s}", path.display())),
            Err(e) => Outcome::Failed(format!(
                "cannot run the editor `{editor}`: {e} (set $EDITOR)"
            )),
        },
        None => Outcome::Failed("$EDITOR is empty".into()),
    };
    // A fresh alternate screen and a terminal whose last frame is empty, so the next draw is
    // whole. (Not `Terminal::clear`: it asks the terminal for the cursor position, and the
    // answer can be lost to the input reader, failing after a timeout.)
    crossterm::terminal::enable_raw_mode()?;
    execute!(
        std::io::stdout(),
        crossterm::terminal::EnterAlternateScreen,
        EnableMouseCapture
    )?;
    *terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let _ = tx.try_send(Msg::Done(outcome));
    Ok(EventStream::new())
}

/// Carries out effects and owns every producer task.
pub struct Executor {
    root: PathBuf,
    pub tx: mpsc::Sender<Msg>,
    run_watches: BTreeMap<PathBuf, JoinHandle<()>>,
    compare_watches: Vec<JoinHandle<()>>,
    /// Re-reads the open sweep's manifest.
    sweep_watch: Option<JoinHandle<()>>,
    owners: Arc<Mutex<ProcessOwners>>,
    stop: Arc<AtomicBool>,
    /// The generation running: its run folder and its stop flag.
    sample: Option<(PathBuf, Arc<AtomicBool>)>,
    _list: JoinHandle<()>,
}

impl Executor {
    /// Starts the run-list watch and the telemetry sampler.
    pub fn start(root: PathBuf, tx: mpsc::Sender<Msg>) -> Executor {
        let ws = Workspace { root: root.clone() };
        let mut list = ws.watch_runs();
        let list_tx = tx.clone();
        let list_task = tokio::spawn(async move {
            while let Some(e) = list.next().await {
                if list_tx.send(Msg::RunList(e)).await.is_err() {
                    break;
                }
            }
        });
        let owners = Arc::new(Mutex::new(ProcessOwners::new()));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (owners, stop, tx) = (owners.clone(), stop.clone(), tx.clone());
            let root = root.clone();
            std::thread::Builder::new()
                .name("ddp-tui-telemetry".into())
                .spawn(move || telemetry_loop(root, owners, stop, tx))
                .expect("the OS can start a thread");
        }
        Executor {
            root,
            tx,
            run_watches: BTreeMap::new(),
            compare_watches: Vec::new(),
            sweep_watch: None,
            owners,
            stop,
            sample: None,
            _list: list_task,
        }
    }

    pub fn set_owners(&self, owners: ProcessOwners) {
        *self.owners.lock().unwrap_or_else(|e| e.into_inner()) = owners;
    }

    fn watch(&self, run: &Run, log_backlog: usize) -> JoinHandle<()> {
        let ws = Workspace {
            root: self.root.clone(),
        };
        let options = RunWatchOptions {
            log_backlog: Some(log_backlog),
            ..Default::default()
        };
        let mut watch = ws.watch_with(run, WatchFrom::Start, options);
        let (tx, dir) = (self.tx.clone(), run.dir.clone());
        tokio::spawn(async move {
            while let Some(event) = watch.next().await {
                let msg = Msg::Run {
                    dir: dir.clone(),
                    event,
                };
                if tx.send(msg).await.is_err() {
                    break;
                }
            }
        })
    }

    /// Runs `f` on the blocking pool and sends its message.
    fn blocking(&self, f: impl FnOnce() -> Msg + Send + 'static) {
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let _ = tx.blocking_send(f());
        });
    }

    pub fn execute(&mut self, effect: Effect) {
        let root = self.root.clone();
        match effect {
            Effect::WatchRun(run) => {
                let task = self.watch(&run, LOG_BACKLOG);
                if let Some(old) = self.run_watches.insert(run.dir.clone(), task) {
                    old.abort();
                }
                let dir = run.dir.clone();
                self.blocking(move || {
                    let path = dir.join(ddp_workspaces::runs::run::SPEC);
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| format!("{}: {e}", path.display()));
                    Msg::Spec { dir, text }
                });
            }
            Effect::UnwatchRun(dir) => {
                if let Some(task) = self.run_watches.remove(&dir) {
                    task.abort();
                }
                if self.sample.as_ref().is_some_and(|(d, _)| *d == dir) {
                    self.stop_sample();
                }
            }
            Effect::WatchCompare(runs) => {
                for t in self.compare_watches.drain(..) {
                    t.abort();
                }
                for run in &runs {
                    let task = self.watch(run, 0);
                    self.compare_watches.push(task);
                }
                self.blocking(move || {
                    Msg::CompareSpecs(
                        ddp_workspaces::present::analysis::comparison(&runs, None)
                            .map_err(|e| e.to_string()),
                    )
                });
            }
            Effect::UnwatchCompare => {
                for t in self.compare_watches.drain(..) {
                    t.abort();
                }
            }
            Effect::WatchSweep(id) => {
                let tx = self.tx.clone();
                let task = tokio::spawn(async move {
                    let mut tick = tokio::time::interval(SWEEP_POLL);
                    loop {
                        tick.tick().await;
                        let (r, i) = (root.clone(), id.clone());
                        let record = tokio::task::spawn_blocking(move || {
                            SweepRecord::load(&r, &i).map_err(|e| e.to_string())
                        })
                        .await
                        .unwrap_or_else(|e| Err(e.to_string()));
                        let msg = Msg::Sweep {
                            id: id.clone(),
                            record,
                        };
                        if tx.send(msg).await.is_err() {
                            break;
                        }
                    }
                });
                if let Some(old) = self.sweep_watch.replace(task) {
                    old.abort();
                }
            }
            Effect::UnwatchSweep => {
                if let Some(task) = self.sweep_watch.take() {
                    task.abort();
                }
            }
            Effect::Sweep(request) => {
                self.blocking(move || Msg::Done(sweep_request(&root, request)))
            }
            Effect::ReadSpecValues(keys) => self.blocking(move || {
                // From the run index brought up to date; a key it cannot answer reads as no
                // values, and the runs' own specs are read instead.
                let ws = Workspace { root };
                let mut index = Index::open_or_memory(&ws.root);
                let fresh = index.refresh(&ws).is_ok();
                let values = keys
                    .into_iter()
                    .map(|k| {
                        let v = fresh.then(|| index.spec_by_dir(&k).ok()).flatten();
                        (k, v.unwrap_or_default())
                    })
                    .collect();
                Msg::SpecValues(values)
            }),
            Effect::Complete(typed) => self.blocking(move || {
                let cwd = std::env::current_dir().unwrap_or_default();
                let options = commands::path_candidates(&cwd, &typed);
                Msg::Completions { typed, options }
            }),
            Effect::StartRun(req) => self.blocking(move || Msg::Done(start(&root, req))),
            Effect::StartSweep(req) => self.blocking(move || {
                Msg::Done(match ddp_workspaces::actions::search::start(&root, &req) {
                    Ok(ddp_workspaces::actions::search::SweepStarted::Runs(s)) => {
                        Outcome::SweepStarted(s.reap_in_background().0.id)
                    }
                    Ok(ddp_workspaces::actions::search::SweepStarted::Search {
                        sweep,
                        mut driver,
                    }) => {
                        std::thread::spawn(move || driver.wait());
                        Outcome::SweepStarted(sweep.id)
                    }
                    Err(e) => Outcome::StartRefused(e.to_string()),
                })
            }),
            Effect::StopRun(run) => self.blocking(move || {
                Msg::Done(match actions::request_stop(&run) {
                    Ok(StopRequest::Signalled { run, .. } | StopRequest::Cancelled { run, .. }) => {
                        Outcome::Stopping(run.record.id)
                    }
                    Ok(done @ StopRequest::AlreadyTerminal(_)) => Outcome::Failed(done.message()),
                    Err(e) => Outcome::Failed(e.to_string()),
                })
            }),
            Effect::ResumeRun(run) => self.blocking(move || {
                Msg::Done(match actions::resume_run(&root, &run.record.id) {
                    Ok(started) => Outcome::Resumed(started.reap_in_background().record.id),
                    Err(e) => Outcome::Failed(e.to_string()),
                })
            }),
            Effect::DeleteRun(run) => self.blocking(move || {
                Msg::Done(match actions::remove_run(&run) {
                    Ok(()) => Outcome::Deleted(run.record.id),
                    Err(e) => Outcome::Failed(e.to_string()),
                })
            }),
            Effect::SetTags(run, tags) => self.blocking(move || {
                let result = actions::validate_tags(&tags).and_then(|()| run.set_tags(&tags));
                Msg::Done(match result {
                    Ok(()) => Outcome::TagsSet(run.record.id),
                    Err(e) => Outcome::Failed(e.to_string()),
                })
            }),
            Effect::Sample {
                run,
                generation,
                options,
            } => self.sample(run, generation, options),
            // Needs the terminal: handled by the loop.
            Effect::EditNotes(_) => {}
        }
    }

    /// Generates on the blocking pool (stopping the generation already running): each piece of
    /// text and the end arrive as [`Msg::Sample`].
    fn sample(&mut self, run: Run, generation: u64, options: SampleOptions) {
        self.stop_sample();
        let stop = Arc::new(AtomicBool::new(false));
        self.sample = Some((run.dir.clone(), stop.clone()));
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let dir = run.dir.clone();
            let msg = |event| Msg::Sample {
                dir: dir.clone(),
                generation,
                event,
            };
            let done = Sampler::new(run, &options.request()).and_then(|s| {
                s.run(|text| {
                    let sent = tx.blocking_send(msg(SampleEvent::Text(text.to_string())));
                    if stop.load(Ordering::SeqCst) || sent.is_err() {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
            });
            let _ = tx.blocking_send(msg(SampleEvent::Done(done.map_err(|e| e.to_string()))));
        });
    }

    fn stop_sample(&mut self) {
        if let Some((_, stop)) = self.sample.take() {
            stop.store(true, Ordering::SeqCst);
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.stop_sample();
        for (_, t) in std::mem::take(&mut self.run_watches) {
            t.abort();
        }
        for t in self.compare_watches.drain(..) {
            t.abort();
        }
        self._list.abort();
    }
}

/// `n`: the same library call as `ddp run --detach`.
fn start(root: &Path, new: NewRun) -> Outcome {
    match actions::start_run(root, &new) {
        Ok(started) => {
            let run = started.reap_in_background();
            Outcome::Started {
                id: run.record.id,
                dir: run.dir,
            }
        }
        Err(e) => Outcome::StartRefused(e.to_string()),
    }
}

/// Samples the devices every [`TICK`] until the executor is dropped.
fn telemetry_loop(
    root: PathBuf,
    owners: Arc<Mutex<ProcessOwners>>,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<Msg>,
) {
    let mut sampler = TelemetrySampler::new(Some(root));
    while !stop.load(Ordering::SeqCst) {
        let current = owners.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let sample = sampler.sample(&current);
        if tx.blocking_send(Msg::Telemetry(sample)).is_err() {
            return;
        }
        // Nobody waits for this thread: it ends at the next period after the stop.
        std::thread::sleep(TICK);
    }
}

/// How often the open sweep's manifest is read again.
const SWEEP_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Carries out a Sweep view's request (stop and resume wait for the search's driver).
fn sweep_request(root: &std::path::Path, request: SweepRequest) -> Outcome {
    use ddp_workspaces::actions::search;
    let done = match request {
        SweepRequest::Stop(id) => search::stop(root, &id).map(|r| {
            let states = r
                .search
                .as_ref()
                .map(ddp_workspaces::present::search::states_text)
                .unwrap_or_default();
            format!("sweep {} stopped: {states}", r.id)
        }),
        SweepRequest::Resume(id) => search::resume(root, &id).map(|(r, mut driver)| {
            std::thread::spawn(move || driver.wait());
            format!("sweep {} resumed", r.id)
        }),
        SweepRequest::Promote { sweep, trial } => search::promote(root, &sweep, &trial)
            .map(|(run, to)| format!("trial {trial} (run {run}) promoted: it trains on to {to}")),
    };
    match done {
        Ok(text) => Outcome::Sweep(text),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::run::sample::SampleEvent;
    use ddp_workspaces::test_util::gpt_run;

    /// The next event of generation `generation` of `run` (other messages skipped).
    async fn next_sample(rx: &mut mpsc::Receiver<Msg>, run: &Run, generation: u64) -> SampleEvent {
        let wait = async {
            loop {
                if let Some(Msg::Sample {
                    dir,
                    generation: g,
                    event,
                }) = rx.recv().await
                {
                    assert_eq!((&dir, g), (&run.dir, generation));
                    return event;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .expect("a sample event within 60 s")
    }

    /// Generations run off the loop and arrive as messages: the library's text piece by piece,
    /// then the end; closing the run stops its generation.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn generations_arrive_as_messages_and_stop_with_their_run() {
        let dir = tempfile::tempdir().unwrap();
        let run = gpt_run(dir.path());
        let (tx, mut rx) = mpsc::channel(CHANNEL);
        let mut exec = Executor::start(dir.path().to_path_buf(), tx);
        let options = SampleOptions {
            prompt: "First".into(),
            tokens: 30,
            seed: 5,
            ..SampleOptions::default()
        };
        exec.execute(Effect::Sample {
            run: run.clone(),
            generation: 7,
            options: options.clone(),
        });
        let mut pieces = Vec::new();
        let done = loop {
            match next_sample(&mut rx, &run, 7).await {
                SampleEvent::Text(t) => pieces.push(t),
                SampleEvent::Done(d) => break d.unwrap(),
            }
        };
        assert_eq!((done.tokens, done.stopped), (30, false));
        let want = Sampler::new(run.clone(), &options.request())
            .unwrap()
            .collect()
            .unwrap();
        assert_eq!(pieces, want.0);

        let endless = SampleOptions {
            tokens: 100_000_000,
            ..options
        };
        exec.execute(Effect::Sample {
            run: run.clone(),
            generation: 8,
            options: endless,
        });
        assert_eq!(
            next_sample(&mut rx, &run, 8).await,
            SampleEvent::Text("First".into())
        );
        exec.execute(Effect::UnwatchRun(run.dir.clone()));
        let done = loop {
            if let SampleEvent::Done(d) = next_sample(&mut rx, &run, 8).await {
                break d.unwrap();
            }
        };
        assert!(done.stopped && done.tokens < 100_000_000, "{done:?}");
    }
}
