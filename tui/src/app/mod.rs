//! The one application state ([`App`]) and the one place it changes ([`App::update`]): every
//! input, watcher event, tick and action result arrives as a [`Msg`]; `update` changes the state
//! and returns the [`Effect`]s to carry out (start a watch, stop a run, ...), which the runtime
//! executes off the UI thread and answers with more messages. Pure: tested without a terminal,
//! files or processes.

use std::collections::HashMap;
use std::path::PathBuf;

use crossterm::event::{KeyEvent, MouseEvent, MouseEventKind};
use ddp_workspaces::actions::{NewRun, NewSweep};
use ddp_workspaces::commands::SampleOptions;
use ddp_workspaces::engine::devices::telemetry::Telemetry;
use ddp_workspaces::follow::run_list::RunListEvent;
use ddp_workspaces::{Run, RunEvent};

use crate::dialogs::input::InputLine;
use crate::dialogs::{Confirm, Dialog, DialogOutcome};
use crate::keys::{self, Action, Context};
use crate::scroll::scroll;
use crate::theme::Theme;
use crate::views::compare::{CompareTable, CompareView};
use crate::views::devices::DevicesState;
use crate::views::run::sample::SampleEvent;
use crate::views::run::{Pane, RunView};
use crate::views::runs::{RunsState, SpecValues};
use crate::views::sweep::{SweepRequest, SweepView};

mod run;
mod sweep;
use ddp_workspaces::sweep::SweepRecord;
/// How long a notice stays in the footer, seconds.
const NOTICE_S: f64 = 6.0;

/// The top-level views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum View {
    #[default]
    Runs,
    Run,
    Devices,
    Compare,
    Sweep,
}

/// A line of feedback in the footer (action results, refusals).
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub text: String,
    pub error: bool,
    pub at: f64,
}

/// Work for the runtime: I/O and processes, never done by `update` itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Start following a run (its events arrive as [`Msg::Run`]) and read its spec.
    WatchRun(Run),
    /// Stop following a run.
    UnwatchRun(PathBuf),
    /// Follow the metrics of runs for Compare and read their specs ([`Msg::CompareSpecs`]).
    WatchCompare(Vec<Run>),
    UnwatchCompare,
    /// Re-read a sweep's manifest while its view is open ([`Msg::Sweep`]).
    WatchSweep(String),
    UnwatchSweep,
    /// Stop, resume or promote in a search.
    Sweep(SweepRequest),
    /// Read spec keys' values from the run index ([`Msg::SpecValues`]).
    ReadSpecValues(Vec<String>),
    /// Complete the path being typed in the new-run dialog ([`Msg::Completions`]).
    Complete(String),
    StartRun(NewRun),
    StartSweep(NewSweep),
    StopRun(Run),
    ResumeRun(Run),
    DeleteRun(Run),
    SetTags(Run, Vec<String>),
    /// Suspend the terminal and open `notes.md` in `$EDITOR`.
    EditNotes(Run),
    /// Generate text from a language-model run, off the UI thread; its text and end arrive as
    /// [`Msg::Sample`] (a generation already running is stopped; so is one whose run closes).
    Sample {
        run: Run,
        generation: u64,
        options: SampleOptions,
    },
}

/// What an effect came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Started {
        id: String,
        dir: PathBuf,
    },
    /// The new-run dialog's request was refused (bad spec, devices, ...): nothing was created.
    StartRefused(String),
    /// The new-run dialog started sweep `id`.
    SweepStarted(String),
    Stopping(String),
    Resumed(String),
    Deleted(String),
    TagsSet(String),
    NotesEdited(String),
    /// What a sweep action did, in words.
    Sweep(String),
    Failed(String),
}

/// Everything that can change the state.
// `RunList` and `Run` carry whole records; they are the common case, so they stay unboxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Msg {
    Key(KeyEvent),
    Mouse(MouseEvent),
    Resize(u16, u16),
    /// The clock (Unix seconds): durations, notices.
    Tick(f64),
    RunList(RunListEvent),
    Run {
        dir: PathBuf,
        event: RunEvent,
    },
    Spec {
        dir: PathBuf,
        text: Result<String, String>,
    },
    CompareSpecs(Result<CompareTable, String>),
    /// Spec keys' values by run folder ([`Effect::ReadSpecValues`]).
    SpecValues(HashMap<String, SpecValues>),
    /// Sweep `id`'s manifest as read now.
    Sweep {
        id: String,
        record: Result<SweepRecord, String>,
    },
    Telemetry(Telemetry),
    Completions {
        typed: String,
        options: Vec<String>,
    },
    /// A piece of a generation of the run in `dir` ([`Effect::Sample`]).
    Sample {
        dir: PathBuf,
        generation: u64,
        event: SampleEvent,
    },
    Done(Outcome),
    /// SIGTERM, SIGHUP, or the input ended.
    Quit,
}

#[derive(Debug)]
pub struct App {
    pub workspace: PathBuf,
    pub theme: Theme,
    pub view: View,
    /// Where `Esc` goes from Devices.
    pub previous: View,
    pub runs: RunsState,
    pub run: Option<RunView>,
    pub compare: Option<CompareView>,
    pub sweep: Option<SweepView>,
    pub devices: DevicesState,
    pub dialog: Option<Dialog>,
    pub notice: Option<Notice>,
    pub now: f64,
    pub size: (u16, u16),
    pub should_quit: bool,
}

impl App {
    pub fn new(workspace: PathBuf, theme: Theme, now: f64, size: (u16, u16)) -> App {
        App {
            workspace,
            theme,
            view: View::Runs,
            previous: View::Runs,
            runs: RunsState::default(),
            run: None,
            compare: None,
            sweep: None,
            devices: DevicesState::default(),
            dialog: None,
            notice: None,
            now,
            size,
            should_quit: false,
        }
    }

    /// The keys that apply now.
    pub fn context(&self) -> Context {
        match self.view {
            View::Runs => Context::Runs,
            View::Run => Context::Run(self.run.as_ref().map_or(Pane::Charts, |r| r.pane)),
            View::Devices => Context::Devices,
            View::Compare => Context::Compare,
            View::Sweep => Context::Sweep,
        }
    }

    /// Whether the screen changes with the clock alone: a live run's duration is shown, a
    /// notice is waiting to expire, or the Devices view is open.
    pub fn shows_time(&self) -> bool {
        self.notice.is_some()
            || self.view == View::Devices
            || match self.view {
                View::Run => self
                    .run
                    .as_ref()
                    .is_some_and(|v| !v.record.status.is_terminal()),
                _ => self.runs.live_count() > 0,
            }
    }

    /// Rows a page-up/down moves: the terminal height less the header and footer.
    pub fn page(&self) -> usize {
        (self.size.1 as usize).saturating_sub(8).max(1)
    }

    pub fn notify(&mut self, text: impl Into<String>, error: bool) {
        self.notice = Some(Notice {
            text: text.into(),
            error,
            at: self.now,
        });
    }

    /// Applies one message; returns the effects to carry out.
    pub fn update(&mut self, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Key(key) => {
                if let Some(dialog) = self.dialog.as_mut() {
                    let outcome = dialog.key(key);
                    return self.on_dialog(outcome);
                }
                match keys::action(self.context(), key) {
                    Some(a) => self.act(a),
                    None => vec![],
                }
            }
            Msg::Mouse(m) => {
                let action = match m.kind {
                    MouseEventKind::ScrollUp => Action::Up,
                    MouseEventKind::ScrollDown => Action::Down,
                    _ => return vec![],
                };
                if self.dialog.is_some() {
                    return vec![];
                }
                (0..3).flat_map(|_| self.act(action)).collect()
            }
            Msg::Resize(w, h) => {
                self.size = (w, h);
                vec![]
            }
            Msg::Tick(now) => {
                self.now = now;
                if self.notice.as_ref().is_some_and(|n| now - n.at > NOTICE_S) {
                    self.notice = None;
                }
                vec![]
            }
            Msg::RunList(event) => self.on_run_list(event),
            Msg::Run { dir, event } => {
                if let Some(v) = self.run.as_mut().filter(|v| v.dir == dir) {
                    v.apply(event.clone());
                }
                if let Some(c) = self.compare.as_mut() {
                    c.apply(&dir, event);
                }
                vec![]
            }
            Msg::Spec { dir, text } => {
                if let Some(v) = self.run.as_mut().filter(|v| v.dir == dir) {
                    let run = Run {
                        dir: v.dir.clone(),
                        record: v.record.clone(),
                    };
                    // Parsing the spec's text is pure: whether there is text to sample.
                    v.sample.lm = Some(match &text {
                        Ok(t) => ddp_workspaces::present::sample::language_model_text(&run, t)
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(format!("cannot read the run's spec: {e}")),
                    });
                    v.spec = Some(text);
                }
                vec![]
            }
            Msg::Sample {
                dir,
                generation,
                event,
            } => {
                if let Some(v) = self.run.as_mut().filter(|v| v.dir == dir) {
                    v.sample.apply(generation, event);
                }
                vec![]
            }
            Msg::CompareSpecs(table) => {
                if let Some(c) = self.compare.as_mut() {
                    c.table = Some(table);
                }
                vec![]
            }
            Msg::SpecValues(values) => {
                self.runs.spec_values_read(values);
                vec![]
            }
            Msg::Sweep { id, record } => {
                if let Some(s) = self.sweep.as_mut().filter(|s| s.id == id) {
                    s.apply(record);
                }
                vec![]
            }
            Msg::Telemetry(t) => {
                self.devices.apply(t);
                vec![]
            }
            Msg::Completions { typed, options } => {
                if let Some(Dialog::NewRun { input, hint, .. }) = self.dialog.as_mut() {
                    crate::dialogs::complete(input, hint, &typed, &options);
                }
                vec![]
            }
            Msg::Done(outcome) => self.on_outcome(outcome),
            Msg::Quit => {
                self.should_quit = true;
                vec![]
            }
        }
    }

    fn on_run_list(&mut self, event: RunListEvent) -> Vec<Effect> {
        let removed = match &event {
            RunListEvent::Removed { dir } => Some(dir.clone()),
            _ => None,
        };
        self.runs.apply(event);
        self.runs.fix_selection();
        let Some(dir) = removed else {
            return vec![];
        };
        let mut effects = vec![];
        if self.run.as_ref().is_some_and(|v| v.dir == dir) {
            let id = self.run.take().map(|v| v.record.id).unwrap_or_default();
            if self.view == View::Run {
                self.view = View::Runs;
            }
            if self.previous == View::Run {
                self.previous = View::Runs;
            }
            self.notify(format!("run {id} was deleted"), true);
            effects.push(Effect::UnwatchRun(dir));
        }
        effects
    }

    /// Applies what a key in the open dialog came to.
    fn on_dialog(&mut self, outcome: DialogOutcome) -> Vec<Effect> {
        if outcome.closes() {
            self.dialog = None;
        }
        match outcome {
            DialogOutcome::Open | DialogOutcome::Close => vec![],
            DialogOutcome::Quit => {
                self.should_quit = true;
                vec![]
            }
            DialogOutcome::Confirmed(Confirm::Stop(run)) => vec![Effect::StopRun(run)],
            DialogOutcome::Confirmed(Confirm::Delete(run)) => vec![Effect::DeleteRun(run)],
            DialogOutcome::StartRun(req) => vec![Effect::StartRun(req)],
            DialogOutcome::StartSweep(req) => vec![Effect::StartSweep(req)],
            DialogOutcome::Complete(typed) => vec![Effect::Complete(typed)],
            DialogOutcome::SetTags(run, tags) => vec![Effect::SetTags(run, tags)],
            DialogOutcome::Filter { text, .. } => {
                let wanted = self.runs.set_filter(text);
                wanted.map(Effect::ReadSpecValues).into_iter().collect()
            }
            DialogOutcome::Sample(prompt) => match self.run.as_mut() {
                Some(v) => {
                    v.sample.prompt = prompt;
                    let started = v.sample.start();
                    vec![sample_effect(v, started)]
                }
                None => vec![],
            },
            DialogOutcome::Search(query) => {
                if let Some(v) = self.run.as_mut() {
                    let (buf, state) = v.logs.current();
                    if let Some(buf) = buf {
                        state.set_search(&query, buf);
                    }
                }
                vec![]
            }
        }
    }

    fn on_outcome(&mut self, outcome: Outcome) -> Vec<Effect> {
        match outcome {
            Outcome::SweepStarted(id) => {
                self.dialog = None;
                self.notify(format!("started sweep {id}"), false);
                self.sweep = Some(SweepView::new(&id));
                self.view = View::Sweep;
                return vec![Effect::WatchSweep(id)];
            }
            Outcome::Started { id, dir } => {
                self.dialog = None;
                self.runs.selected = Some(dir);
                self.notify(format!("started run {id}"), false);
            }
            Outcome::StartRefused(error) => match self.dialog.as_mut() {
                Some(Dialog::NewRun { error: e, busy, .. }) => {
                    *e = Some(error);
                    *busy = false;
                }
                _ => self.notify(error, true),
            },
            Outcome::Stopping(id) => self.notify(
                format!("stopping run {id} (replicas finish their step)"),
                false,
            ),
            Outcome::Resumed(id) => self.notify(format!("resumed run {id}"), false),
            Outcome::Deleted(id) => self.notify(format!("deleted run {id}"), false),
            Outcome::TagsSet(id) => self.notify(format!("tags of {id} saved"), false),
            Outcome::NotesEdited(id) => self.notify(format!("notes of {id} saved"), false),
            Outcome::Sweep(text) => self.notify(text, false),
            Outcome::Failed(error) => self.notify(error, true),
        }
        vec![]
    }

    /// The run an action applies to: the open run in the Run view, else the selected one.
    fn target(&self) -> Option<Run> {
        match self.view {
            View::Run => {
                let v = self.run.as_ref()?;
                Some(Run {
                    dir: v.dir.clone(),
                    record: v.record.clone(),
                })
            }
            _ => self.runs.selected_entry().map(|e| e.run.clone()),
        }
    }

    /// Carries out a key's action in the current view.
    pub fn act(&mut self, action: Action) -> Vec<Effect> {
        let page = self.page();
        let global = matches!(
            action,
            Action::Quit | Action::Help | Action::Back | Action::Devices
        );
        if self.view == View::Sweep && !global {
            return self.act_sweep(action, page);
        }
        match action {
            Action::Quit => {
                self.should_quit = true;
                vec![]
            }
            Action::Help => {
                self.dialog = Some(Dialog::Help);
                vec![]
            }
            Action::Back => self.back(),
            Action::Devices => {
                if self.view != View::Devices {
                    self.previous = self.view;
                    self.view = View::Devices;
                }
                vec![]
            }
            Action::NewRun => {
                self.dialog = Some(Dialog::NewRun {
                    input: InputLine::default(),
                    error: None,
                    hint: None,
                    busy: false,
                });
                vec![]
            }
            Action::Stop | Action::Resume | Action::Delete | Action::Tags | Action::Notes => {
                self.run_action(action)
            }
            _ => match self.view {
                View::Runs => self.act_runs(action, page),
                View::Run => self.act_run(action, page),
                View::Compare => {
                    if let Some(c) = self.compare.as_mut() {
                        compare_key(c, action, page);
                    }
                    vec![]
                }
                View::Devices | View::Sweep => vec![],
            },
        }
    }

    fn back(&mut self) -> Vec<Effect> {
        match self.view {
            View::Runs => {
                if !self.runs.filter.is_empty() {
                    self.runs.filter.clear();
                    self.runs.fix_selection();
                }
                vec![]
            }
            View::Run => {
                self.view = View::Runs;
                match self.run.take() {
                    Some(v) => vec![Effect::UnwatchRun(v.dir)],
                    None => vec![],
                }
            }
            View::Compare => {
                self.view = View::Runs;
                self.compare = None;
                vec![Effect::UnwatchCompare]
            }
            View::Sweep => {
                self.view = View::Runs;
                self.sweep = None;
                vec![Effect::UnwatchSweep]
            }
            View::Devices => {
                self.view = match self.previous {
                    View::Run if self.run.is_some() => View::Run,
                    View::Compare if self.compare.is_some() => View::Compare,
                    View::Sweep if self.sweep.is_some() => View::Sweep,
                    _ => View::Runs,
                };
                vec![]
            }
        }
    }

    fn act_runs(&mut self, action: Action, page: usize) -> Vec<Effect> {
        let runs = &mut self.runs;
        match action {
            Action::Up => runs.move_selection(-1),
            Action::Down => runs.move_selection(1),
            Action::PageUp => runs.move_selection(-(page as isize)),
            Action::PageDown => runs.move_selection(page as isize),
            Action::Home => runs.move_selection(isize::MIN / 2),
            Action::End => runs.move_selection(isize::MAX / 2),
            Action::CycleSort => runs.cycle_sort(),
            Action::ReverseSort => runs.reversed = !runs.reversed,
            Action::ToggleGroup => runs.group = !runs.group,
            Action::ToggleMark => {
                runs.toggle_mark();
                runs.move_selection(1);
            }
            Action::Find => {
                self.dialog = Some(Dialog::Filter {
                    input: InputLine::new(&self.runs.filter),
                    before: self.runs.filter.clone(),
                });
            }
            Action::Open => return self.open_selected(),
            Action::Compare => return self.open_compare(),
            Action::OpenSweep => return self.open_sweep(),
            _ => {}
        }
        vec![]
    }

    fn open_selected(&mut self) -> Vec<Effect> {
        let Some(entry) = self.runs.selected_entry() else {
            if let Some(u) = self
                .runs
                .selected
                .as_ref()
                .and_then(|d| self.runs.unreadable.iter().find(|u| &u.dir == d))
            {
                let text = format!("cannot open {}: {}", u.dir.display(), u.error);
                self.notify(text, true);
            }
            return vec![];
        };
        let run = entry.run.clone();
        let mut effects = vec![];
        if let Some(old) = self.run.take() {
            effects.push(Effect::UnwatchRun(old.dir));
        }
        self.run = Some(RunView::new(run.dir.clone(), run.record.clone()));
        self.view = View::Run;
        effects.push(Effect::WatchRun(run));
        effects
    }

    fn open_compare(&mut self) -> Vec<Effect> {
        let marked: Vec<Run> = self
            .runs
            .marked_entries()
            .into_iter()
            .map(|e| e.run.clone())
            .collect();
        if marked.len() < 2 {
            self.notify(
                "mark two or more runs with Space, then press c to compare them",
                true,
            );
            return vec![];
        }
        self.compare = Some(CompareView::new(&marked));
        self.view = View::Compare;
        vec![Effect::WatchCompare(marked)]
    }
}

/// Chart keys and the key table's scrolling in the Compare view.
fn compare_key(c: &mut CompareView, action: Action, page: usize) {
    match action {
        Action::Smoother => c.chart.smoother(),
        Action::Rougher => c.chart.rougher(),
        Action::ToggleLogScale => c.chart.log_loss = !c.chart.log_loss,
        Action::CycleX => c.chart.cycle_x(),
        _ => {
            let rows = c.table_rows();
            scroll(&mut c.scroll, action, page, rows);
        }
    }
}

/// The effect that generates `started` (a generation's number and options) for the open run.
fn sample_effect(v: &RunView, (generation, options): (u64, SampleOptions)) -> Effect {
    Effect::Sample {
        run: Run {
            dir: v.dir.clone(),
            record: v.record.clone(),
        },
        generation,
        options,
    }
}
