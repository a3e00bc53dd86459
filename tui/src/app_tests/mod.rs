//! `App::update` without a terminal: every key and message, with the exact state it leaves and
//! the exact effects it returns.
//!
//! Layout: this file holds the fixtures (four runs A–D, key helpers); `navigation` (views, panes,
//! selection, filter, marks, keys of each pane), `actions` (stop, delete, resume, tags, notes),
//! `new_run` (the new-run dialog), `updates` (watcher events, ticks, outcomes, telemetry),
//! `sample` (the Sample pane of language-model runs).

mod actions;
mod navigation;
mod new_run;
mod sample;
mod updates;

use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseEvent, MouseEventKind};
use ddp_workspaces::follow::run_list::{RunEntry, RunListEvent};
use ddp_workspaces::metrics::{MetricKind, MetricRecord};
use ddp_workspaces::runs::run::EventRecord;
use ddp_workspaces::runs::workspace::Unreadable;
use ddp_workspaces::test_util;
use ddp_workspaces::{Run, RunEvent, RunStatus, SupervisorEvent};

use crate::app::{App, Effect, Msg, Notice, Outcome, View};
use crate::dialogs::input::InputLine;
use crate::dialogs::{Confirm, Dialog};
use crate::theme::Theme;
use crate::views::run::{LogTab, Pane};
use crate::views::runs::SortKey;
use crate::views::runs::tests::entry;
use crate::widgets::logview::LogSource;
use ddp_workspaces::actions::NewRun;

const NOW: f64 = 1_795_000_100.0;

const A: &str = "20261104-000000-aaaaaa"; // running, mnist
const B: &str = "20261103-000000-bbbbbb"; // completed, mnist, tagged
const C: &str = "20261102-000000-cccccc"; // stopped, cifar
const D: &str = "20261101-000000-dddddd"; // failed, cifar

fn dir(id: &str) -> PathBuf {
    let exp = if id == A || id == B { "mnist" } else { "cifar" };
    PathBuf::from(format!("/ws/experiments/{exp}/runs/{id}"))
}

fn entries() -> Vec<RunEntry> {
    let mut b = entry(B, "mnist", RunStatus::Completed);
    b.tags = vec!["baseline".into(), "lr".into()];
    vec![
        entry(A, "mnist", RunStatus::Running),
        b,
        entry(C, "cifar", RunStatus::Stopped),
        entry(D, "cifar", RunStatus::Failed),
    ]
}

fn run(id: &str) -> Run {
    entries()
        .into_iter()
        .find(|e| e.run.record.id == id)
        .unwrap()
        .run
}

/// Four runs (newest first: A running, B completed, C stopped, D failed); A selected.
fn app() -> App {
    let mut app = App::new(PathBuf::from("/ws"), Theme { color: false }, NOW, (100, 30));
    let effects = app.update(Msg::RunList(RunListEvent::Snapshot {
        entries: entries(),
        unreadable: vec![],
    }));
    assert_eq!(effects, []);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(A).as_path()));
    app
}

fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::from(code))
}

fn ch(c: char) -> Msg {
    key(KeyCode::Char(c))
}

fn press(app: &mut App, code: KeyCode) -> Vec<Effect> {
    app.update(key(code))
}

fn press_char(app: &mut App, c: char) -> Vec<Effect> {
    app.update(ch(c))
}

/// Types `text` into whatever has the keys; every keystroke must return no effect.
fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        assert_eq!(app.update(ch(c)), [], "typing {c:?}");
    }
}

fn select(app: &mut App, id: &str) {
    app.runs.selected = Some(dir(id));
}

fn notice(text: &str, error: bool) -> Option<Notice> {
    Some(Notice {
        text: text.into(),
        error,
        at: NOW,
    })
}

fn open(app: &mut App, id: &str) {
    select(app, id);
    assert_eq!(press(app, KeyCode::Enter), [Effect::WatchRun(run(id))]);
    assert_eq!(app.view, View::Run);
}

fn pane(app: &App) -> Pane {
    app.run.as_ref().unwrap().pane
}

fn shown_ids(app: &App) -> Vec<String> {
    app.runs
        .rows()
        .iter()
        .filter_map(|r| r.dir())
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

fn metric(kind: MetricKind, epoch: usize, step: u64, loss: f64) -> MetricRecord {
    let accuracy = (kind != MetricKind::Train).then_some(0.9);
    test_util::metric(kind, epoch, step, loss, accuracy).time(NOW + step as f64)
}
