//! `App::update` without a terminal: every key and message, with the exact state it leaves and
//! the exact effects it returns.

use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseEvent, MouseEventKind};
use ddp_workspaces::metrics::{MetricKind, MetricRecord};
use ddp_workspaces::run::EventRecord;
use ddp_workspaces::run_list::{RunEntry, RunListEvent};
use ddp_workspaces::workspace::Unreadable;
use ddp_workspaces::{Run, RunEvent, RunStatus, SupervisorEvent};

use crate::app::{App, Effect, Msg, NewRunRequest, Notice, Outcome, View};
use crate::dialog::{Confirm, Dialog};
use crate::input::InputLine;
use crate::logview::LogSource;
use crate::run_view::{LogTab, Pane};
use crate::runs::SortKey;
use crate::runs::tests::entry;
use crate::theme::Theme;

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
    MetricRecord {
        time: NOW + step as f64,
        rank: 0,
        kind,
        epoch,
        step,
        loss,
        accuracy: (kind != MetricKind::Train).then_some(0.9),
        lr: 0.01,
        samples_per_sec: 100.0,
        samples: None,
        world_size: 2,
    }
}

#[test]
fn enter_opens_the_selected_run_and_esc_closes_it() {
    let mut app = app();
    select(&mut app, B);
    assert_eq!(press(&mut app, KeyCode::Enter), [Effect::WatchRun(run(B))]);
    assert_eq!(app.view, View::Run);
    let v = app.run.as_ref().unwrap();
    assert_eq!(
        (v.dir.as_path(), v.record.id.as_str()),
        (dir(B).as_path(), B)
    );
    assert_eq!(v.pane, Pane::Charts);
    assert_eq!(press(&mut app, KeyCode::Esc), [Effect::UnwatchRun(dir(B))]);
    assert_eq!(app.view, View::Runs);
    assert!(app.run.is_none());
    // `l` and → open too; the selection is kept.
    assert_eq!(press_char(&mut app, 'l'), [Effect::WatchRun(run(B))]);
    assert_eq!(press(&mut app, KeyCode::Esc), [Effect::UnwatchRun(dir(B))]);
    assert_eq!(press(&mut app, KeyCode::Right), [Effect::WatchRun(run(B))]);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(B).as_path()));
}

#[test]
fn enter_on_an_unreadable_folder_says_why_and_on_nothing_does_nothing() {
    let mut app = App::new(PathBuf::from("/ws"), Theme { color: false }, NOW, (80, 24));
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    assert_eq!((app.view, &app.notice), (View::Runs, &None));
    app.update(Msg::RunList(RunListEvent::Snapshot {
        entries: vec![],
        unreadable: vec![Unreadable {
            dir: "/ws/experiments/x/runs/bad".into(),
            error: "run.json: not a valid run record".into(),
        }],
    }));
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    assert_eq!(app.view, View::Runs);
    assert_eq!(
        app.notice,
        notice(
            "cannot open /ws/experiments/x/runs/bad: run.json: not a valid run record",
            true
        )
    );
}

#[test]
fn tab_backtab_and_digits_switch_panes() {
    let mut app = app();
    open(&mut app, A);
    for want in [Pane::Logs, Pane::Events, Pane::Spec, Pane::Charts] {
        assert_eq!(press(&mut app, KeyCode::Tab), []);
        assert_eq!(pane(&app), want);
    }
    assert_eq!(press(&mut app, KeyCode::BackTab), []);
    assert_eq!(pane(&app), Pane::Logs);
    for (c, want) in [
        ('3', Pane::Events),
        ('4', Pane::Spec),
        ('1', Pane::Charts),
        ('2', Pane::Logs),
    ] {
        assert_eq!(press_char(&mut app, c), []);
        assert_eq!(pane(&app), want);
    }
    assert_eq!(app.view, View::Run);
    // Pane keys mean nothing in the Runs view.
    press(&mut app, KeyCode::Esc);
    assert_eq!(press_char(&mut app, '3'), []);
    assert_eq!(press(&mut app, KeyCode::Tab), []);
    assert_eq!(app.view, View::Runs);
}

#[test]
fn stop_asks_first_and_y_stops() {
    let mut app = app();
    assert_eq!(press_char(&mut app, 's'), []);
    assert_eq!(app.dialog, Some(Dialog::Confirm(Confirm::Stop(run(A)))));
    // Other keys leave the question open.
    assert_eq!(press_char(&mut app, 'x'), []);
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    assert_eq!(app.dialog, Some(Dialog::Confirm(Confirm::Stop(run(A)))));
    assert_eq!(press_char(&mut app, 'y'), [Effect::StopRun(run(A))]);
    assert_eq!(app.dialog, None);
    assert_eq!(app.view, View::Runs);
    // `Y` too, and from the Run view the open run is the target.
    select(&mut app, C);
    open(&mut app, A);
    select(&mut app, C);
    assert_eq!(press_char(&mut app, 's'), []);
    assert_eq!(app.dialog, Some(Dialog::Confirm(Confirm::Stop(run(A)))));
    assert_eq!(press_char(&mut app, 'Y'), [Effect::StopRun(run(A))]);
    assert_eq!(app.dialog, None);
    assert_eq!(app.view, View::Run);
}

#[test]
fn n_esc_and_q_cancel_a_confirmation_without_effect() {
    for cancel in [ch('n'), ch('N'), key(KeyCode::Esc), ch('q')] {
        let mut app = app();
        press_char(&mut app, 's');
        assert!(app.dialog.is_some());
        assert_eq!(app.update(cancel.clone()), [], "{cancel:?}");
        assert_eq!(app.dialog, None, "{cancel:?}");
        assert!(!app.should_quit, "{cancel:?}: q cancels, it does not quit");
        assert_eq!(app.notice, None);
        assert_eq!(app.view, View::Runs);
    }
}

#[test]
fn stop_refuses_a_finished_run() {
    for (id, status) in [(B, "completed"), (C, "stopped"), (D, "failed")] {
        let mut app = app();
        select(&mut app, id);
        assert_eq!(press_char(&mut app, 's'), []);
        assert_eq!(app.dialog, None);
        assert_eq!(
            app.notice,
            notice(&format!("run {id} is already {status}"), true)
        );
    }
}

#[test]
fn delete_refuses_a_live_run_and_confirms_a_finished_one() {
    let mut app = app();
    assert_eq!(press_char(&mut app, 'd'), []);
    assert_eq!(app.dialog, None);
    assert_eq!(
        app.notice,
        notice(&format!("run {A} is running: stop it first (s)"), true)
    );
    select(&mut app, B);
    assert_eq!(press_char(&mut app, 'd'), []);
    assert_eq!(app.dialog, Some(Dialog::Confirm(Confirm::Delete(run(B)))));
    assert_eq!(press_char(&mut app, 'n'), []);
    assert_eq!(app.dialog, None);
    assert_eq!(press_char(&mut app, 'd'), []);
    assert_eq!(press_char(&mut app, 'y'), [Effect::DeleteRun(run(B))]);
    assert_eq!(app.dialog, None);
}

#[test]
fn resume_only_a_stopped_or_failed_run() {
    let mut app = app();
    for (id, status) in [(A, "running"), (B, "completed")] {
        select(&mut app, id);
        assert_eq!(press_char(&mut app, 'r'), []);
        assert_eq!(
            app.notice,
            notice(
                &format!("run {id} is {status}: only a stopped or failed run can be resumed"),
                true
            )
        );
        assert_eq!(app.dialog, None);
    }
    app.notice = None;
    for id in [C, D] {
        select(&mut app, id);
        assert_eq!(press_char(&mut app, 'r'), [Effect::ResumeRun(run(id))]);
        assert_eq!(app.dialog, None);
        assert_eq!(app.notice, None);
    }
}

#[test]
fn tags_dialog_is_prefilled_and_saves_split_deduplicated_tags() {
    let mut app = app();
    select(&mut app, B);
    assert_eq!(press_char(&mut app, 't'), []);
    assert_eq!(
        app.dialog,
        Some(Dialog::Tags {
            run: run(B),
            input: InputLine::new("baseline lr"),
        })
    );
    type_text(&mut app, " new,baseline  x,,lr new");
    assert_eq!(
        press(&mut app, KeyCode::Enter),
        [Effect::SetTags(
            run(B),
            vec!["baseline".into(), "lr".into(), "new".into(), "x".into()]
        )]
    );
    assert_eq!(app.dialog, None);
    // Esc cancels; an emptied line clears the tags.
    press_char(&mut app, 't');
    type_text(&mut app, "zzz");
    assert_eq!(press(&mut app, KeyCode::Esc), []);
    assert_eq!(app.dialog, None);
    press_char(&mut app, 't');
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('u'),
        KeyModifiers::CONTROL,
    )));
    assert_eq!(
        press(&mut app, KeyCode::Enter),
        [Effect::SetTags(run(B), vec![])]
    );
    // A run without tags starts empty.
    select(&mut app, C);
    press_char(&mut app, 't');
    assert_eq!(
        app.dialog,
        Some(Dialog::Tags {
            run: run(C),
            input: InputLine::default(),
        })
    );
}

#[test]
fn e_edits_the_notes_of_the_target_run() {
    let mut app = app();
    select(&mut app, C);
    assert_eq!(press_char(&mut app, 'e'), [Effect::EditNotes(run(C))]);
    assert_eq!(app.dialog, None);
    open(&mut app, D);
    assert_eq!(press_char(&mut app, 'e'), [Effect::EditNotes(run(D))]);
}

#[test]
fn run_actions_do_nothing_in_devices_and_compare_and_need_a_run() {
    let mut app = app();
    press_char(&mut app, 'D');
    for c in ['s', 'r', 'd', 't', 'e'] {
        assert_eq!(press_char(&mut app, c), []);
        assert_eq!((app.dialog.as_ref(), app.notice.as_ref()), (None, None));
    }
    let mut empty = App::new(PathBuf::from("/ws"), Theme { color: false }, NOW, (80, 24));
    empty.update(Msg::RunList(RunListEvent::Snapshot {
        entries: vec![],
        unreadable: vec![],
    }));
    assert_eq!(press_char(&mut empty, 's'), []);
    assert_eq!(empty.notice, notice("no run selected", true));
}

#[test]
fn new_run_dialog_starts_a_run_and_shows_a_refusal() {
    let mut app = app();
    assert_eq!(press_char(&mut app, 'n'), []);
    assert_eq!(
        app.dialog,
        Some(Dialog::NewRun {
            input: InputLine::default(),
            error: None,
            hint: None,
            busy: false,
        })
    );
    let line = "examples/mnist.toml --set train.lr=0.01 --name 'quick one' --replicas 2";
    type_text(&mut app, line);
    let request = NewRunRequest {
        spec: "examples/mnist.toml".into(),
        overrides: vec!["train.lr=0.01".into()],
        name: Some("quick one".into()),
        replicas: Some(2),
        trainer: None,
    };
    assert_eq!(
        press(&mut app, KeyCode::Enter),
        [Effect::StartRun(request.clone())]
    );
    assert_eq!(
        app.dialog,
        Some(Dialog::NewRun {
            input: InputLine::new(line),
            error: None,
            hint: None,
            busy: true,
        })
    );
    // While busy, keys change nothing (not even Esc or a second Enter).
    for k in [ch('x'), key(KeyCode::Esc), key(KeyCode::Enter), ch('q')] {
        assert_eq!(app.update(k), []);
    }
    assert!(!app.should_quit);
    assert!(matches!(
        app.dialog,
        Some(Dialog::NewRun { busy: true, .. })
    ));
    assert_eq!(
        app.update(Msg::Done(Outcome::StartRefused(
            "spec examples/mnist.toml: no such file".into()
        ))),
        []
    );
    assert_eq!(
        app.dialog,
        Some(Dialog::NewRun {
            input: InputLine::new(line),
            error: Some("spec examples/mnist.toml: no such file".into()),
            hint: None,
            busy: false,
        })
    );
    assert_eq!(app.notice, None);
    // Try again: the error goes, the dialog closes on success and the new run is selected.
    assert_eq!(press(&mut app, KeyCode::Enter), [Effect::StartRun(request)]);
    assert!(matches!(
        app.dialog,
        Some(Dialog::NewRun {
            error: None,
            busy: true,
            ..
        })
    ));
    let new_dir = PathBuf::from("/ws/experiments/mnist/runs/20261105-000000-eeeeee");
    assert_eq!(
        app.update(Msg::Done(Outcome::Started {
            id: "20261105-000000-eeeeee".into(),
            dir: new_dir.clone(),
        })),
        []
    );
    assert_eq!(app.dialog, None);
    assert_eq!(app.runs.selected, Some(new_dir));
    assert_eq!(
        app.notice,
        notice("started run 20261105-000000-eeeeee", false)
    );
}

#[test]
fn new_run_dialog_parses_before_asking_and_esc_cancels() {
    let mut app = app();
    press_char(&mut app, 'n');
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    match &app.dialog {
        Some(Dialog::NewRun { error, busy, .. }) => {
            assert!(!busy);
            assert!(
                error.as_deref().unwrap().starts_with("which spec?"),
                "{error:?}"
            );
        }
        d => panic!("{d:?}"),
    }
    type_text(&mut app, "a.toml --set x");
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    assert!(matches!(
        &app.dialog,
        Some(Dialog::NewRun { error: Some(e), busy: false, .. }) if e == "--set x: expected key=value"
    ));
    assert_eq!(press(&mut app, KeyCode::Esc), []);
    assert_eq!(app.dialog, None);
    // A refusal that arrives after the dialog was closed becomes a notice.
    app.update(Msg::Done(Outcome::StartRefused("too late".into())));
    assert_eq!(app.notice, notice("too late", true));
}

#[test]
fn tab_in_the_new_run_dialog_completes_the_last_word() {
    let mut app = app();
    press_char(&mut app, 'n');
    type_text(&mut app, "examples/m");
    assert_eq!(
        press(&mut app, KeyCode::Tab),
        [Effect::Complete("examples/m".into())]
    );
    app.update(Msg::Completions {
        typed: "examples/m".into(),
        options: vec!["examples/mlp.toml".into(), "examples/mnist.toml".into()],
    });
    assert_eq!(
        app.dialog,
        Some(Dialog::NewRun {
            input: InputLine::new("examples/m"),
            error: None,
            hint: Some("mlp.toml  mnist.toml".into()),
            busy: false,
        })
    );
    // Typing on drops the hint; a single candidate replaces the word.
    type_text(&mut app, "n");
    assert!(matches!(
        app.dialog,
        Some(Dialog::NewRun { hint: None, .. })
    ));
    assert_eq!(
        press(&mut app, KeyCode::Tab),
        [Effect::Complete("examples/mn".into())]
    );
    // Stale candidates (for what was typed before) are ignored.
    app.update(Msg::Completions {
        typed: "examples/m".into(),
        options: vec!["examples/mlp.toml".into()],
    });
    app.update(Msg::Completions {
        typed: "examples/mn".into(),
        options: vec!["examples/mnist.toml".into()],
    });
    assert_eq!(
        app.dialog,
        Some(Dialog::NewRun {
            input: InputLine::new("examples/mnist.toml"),
            error: None,
            hint: None,
            busy: false,
        })
    );
    type_text(&mut app, " --set x");
    assert_eq!(
        press(&mut app, KeyCode::Tab),
        [Effect::Complete("x".into())]
    );
    app.update(Msg::Completions {
        typed: "x".into(),
        options: vec![],
    });
    assert!(matches!(&app.dialog, Some(Dialog::NewRun { hint: Some(h), .. }) if h == "no match"));
    // Completions without the dialog are dropped.
    press(&mut app, KeyCode::Esc);
    app.update(Msg::Completions {
        typed: "x".into(),
        options: vec!["xy".into()],
    });
    assert_eq!(app.dialog, None);
}

#[test]
fn filter_narrows_as_typed_and_esc_restores_the_previous_one() {
    let mut app = app();
    assert_eq!(shown_ids(&app), [A, B, C, D]);
    assert_eq!(press_char(&mut app, '/'), []);
    assert_eq!(
        app.dialog,
        Some(Dialog::Filter {
            input: InputLine::default(),
            before: String::new(),
        })
    );
    type_text(&mut app, "cif");
    assert_eq!(app.runs.filter, "cif");
    assert_eq!(shown_ids(&app), [C, D]);
    // The selection follows the rows shown.
    assert_eq!(app.runs.selected.as_deref(), Some(dir(C).as_path()));
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    assert_eq!(app.dialog, None);
    assert_eq!(app.runs.filter, "cif");
    // Again: edit live, then Esc goes back to "cif".
    press_char(&mut app, '/');
    assert_eq!(
        app.dialog,
        Some(Dialog::Filter {
            input: InputLine::new("cif"),
            before: "cif".into(),
        })
    );
    for _ in 0..3 {
        press(&mut app, KeyCode::Backspace);
    }
    assert_eq!(shown_ids(&app), [A, B, C, D]);
    type_text(&mut app, "BASE");
    assert_eq!(shown_ids(&app), [B]);
    type_text(&mut app, "zzz");
    assert_eq!(shown_ids(&app), Vec::<String>::new());
    assert_eq!(app.runs.selected, None);
    assert_eq!(press(&mut app, KeyCode::Esc), []);
    assert_eq!(app.dialog, None);
    assert_eq!(app.runs.filter, "cif");
    assert_eq!(shown_ids(&app), [C, D]);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(C).as_path()));
    // Esc without a dialog clears the filter.
    assert_eq!(press(&mut app, KeyCode::Esc), []);
    assert_eq!(app.runs.filter, "");
    assert_eq!(shown_ids(&app), [A, B, C, D]);
    assert_eq!(app.view, View::Runs);
}

#[test]
fn marks_and_compare() {
    let mut app = app();
    assert_eq!(press_char(&mut app, 'c'), []);
    let refusal = notice(
        "mark two or more runs with Space, then press c to compare them",
        true,
    );
    assert_eq!(app.notice, refusal);
    // Space marks and moves down.
    assert_eq!(press_char(&mut app, ' '), []);
    assert_eq!(app.runs.marked.iter().collect::<Vec<_>>(), [&dir(A)]);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(B).as_path()));
    app.notice = None;
    assert_eq!(press_char(&mut app, 'c'), []);
    assert_eq!(app.notice, refusal);
    assert_eq!(app.view, View::Runs);
    press_char(&mut app, 'j'); // C
    press_char(&mut app, ' ');
    assert_eq!(app.runs.marked.len(), 2);
    assert_eq!(
        press_char(&mut app, 'c'),
        [Effect::WatchCompare(vec![run(A), run(C)])]
    );
    assert_eq!(app.view, View::Compare);
    let c = app.compare.as_ref().unwrap();
    assert_eq!(c.runs, [(dir(A), run(A).record), (dir(C), run(C).record)]);
    assert!(c.table.is_none());
    // Events of the compared runs reach it, others do not.
    app.update(Msg::Run {
        dir: dir(A),
        event: RunEvent::Metric(metric(MetricKind::Train, 1, 1, 2.0)),
    });
    app.update(Msg::Run {
        dir: dir(B),
        event: RunEvent::Metric(metric(MetricKind::Train, 1, 1, 2.0)),
    });
    let c = app.compare.as_ref().unwrap();
    assert_eq!(c.metrics.keys().collect::<Vec<_>>(), [&dir(A)]);
    app.update(Msg::CompareSpecs(Err("spec.toml: missing".into())));
    assert!(matches!(
        &app.compare.as_ref().unwrap().table,
        Some(Err(e)) if e == "spec.toml: missing"
    ));
    // Chart keys work in Compare.
    press_char(&mut app, 'l');
    assert!(app.compare.as_ref().unwrap().chart.log_loss);
    assert_eq!(press(&mut app, KeyCode::Esc), [Effect::UnwatchCompare]);
    assert_eq!(app.view, View::Runs);
    assert!(app.compare.is_none());
    // Marks stay; Space again unmarks.
    select(&mut app, A);
    press_char(&mut app, ' ');
    assert_eq!(app.runs.marked.iter().collect::<Vec<_>>(), [&dir(C)]);
}

#[test]
fn devices_and_back_to_where_it_came_from() {
    let mut app = app();
    assert_eq!(press_char(&mut app, 'D'), []);
    assert_eq!((app.view, app.previous), (View::Devices, View::Runs));
    assert_eq!(press(&mut app, KeyCode::Esc), []);
    assert_eq!(app.view, View::Runs);

    open(&mut app, A);
    press_char(&mut app, 'D');
    assert_eq!((app.view, app.previous), (View::Devices, View::Run));
    assert_eq!(press(&mut app, KeyCode::Esc), []);
    assert_eq!(app.view, View::Run);
    assert!(app.run.is_some());

    press(&mut app, KeyCode::Esc);
    select(&mut app, A);
    press_char(&mut app, ' ');
    press_char(&mut app, ' ');
    press_char(&mut app, 'c');
    assert_eq!(app.view, View::Compare);
    press_char(&mut app, 'D');
    assert_eq!((app.view, app.previous), (View::Devices, View::Compare));
    assert_eq!(press(&mut app, KeyCode::Esc), []);
    assert_eq!(app.view, View::Compare);
}

#[test]
fn help_opens_with_question_mark_and_any_key_closes_it() {
    let mut app = app();
    assert_eq!(press_char(&mut app, '?'), []);
    assert_eq!(app.dialog, Some(Dialog::Help));
    // The closing key does nothing else.
    assert_eq!(press_char(&mut app, 'j'), []);
    assert_eq!(app.dialog, None);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(A).as_path()));
    for k in [key(KeyCode::Esc), key(KeyCode::Enter), ch('?'), ch('s')] {
        press_char(&mut app, '?');
        assert_eq!(app.update(k), []);
        assert_eq!(app.dialog, None);
        assert_eq!(app.view, View::Runs);
    }
    // `q` closes it and quits.
    press_char(&mut app, '?');
    press_char(&mut app, 'q');
    assert_eq!(app.dialog, None);
    assert!(app.should_quit);
}

#[test]
fn q_quits_from_every_view() {
    type Setup = fn(&mut App);
    let views: [(&str, Setup); 8] = [
        ("runs", |_| {}),
        ("run charts", |a| open(a, A)),
        ("run logs", |a| {
            open(a, A);
            press_char(a, '2');
        }),
        ("run events", |a| {
            open(a, A);
            press_char(a, '3');
        }),
        ("run spec", |a| {
            open(a, A);
            press_char(a, '4');
        }),
        ("devices", |a| {
            press_char(a, 'D');
        }),
        ("compare", |a| {
            press_char(a, ' ');
            press_char(a, ' ');
            press_char(a, 'c');
            assert_eq!(a.view, View::Compare);
        }),
        ("empty", |a| {
            a.update(Msg::RunList(RunListEvent::Snapshot {
                entries: vec![],
                unreadable: vec![],
            }));
        }),
    ];
    for (name, setup) in views {
        let mut app = app();
        setup(&mut app);
        assert!(app.dialog.is_none(), "{name}");
        assert!(!app.should_quit, "{name}");
        assert_eq!(press_char(&mut app, 'q'), [], "{name}");
        assert!(app.should_quit, "{name}");
        // Ctrl-C too.
        let mut app = self::app();
        setup(&mut app);
        app.update(Msg::Key(KeyEvent::new(
            KeyCode::Char('c'),
            KeyModifiers::CONTROL,
        )));
        assert!(app.should_quit, "{name}: ctrl-c");
    }
    let mut app = app();
    assert_eq!(app.update(Msg::Quit), []);
    assert!(app.should_quit);
}

#[test]
fn the_open_run_removed_returns_to_the_runs_view() {
    let mut app = app();
    open(&mut app, A);
    // Another run going away changes nothing here.
    assert_eq!(
        app.update(Msg::RunList(RunListEvent::Removed { dir: dir(C) })),
        []
    );
    assert_eq!(app.view, View::Run);
    assert_eq!(shown_ids(&app), [A, B, D]);
    assert_eq!(
        app.update(Msg::RunList(RunListEvent::Removed { dir: dir(A) })),
        [Effect::UnwatchRun(dir(A))]
    );
    assert_eq!(app.view, View::Runs);
    assert!(app.run.is_none());
    assert_eq!(app.notice, notice(&format!("run {A} was deleted"), true));
    assert_eq!(shown_ids(&app), [B, D]);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(B).as_path()));

    // From Devices over the open run: Esc then goes to Runs.
    open(&mut app, B);
    press_char(&mut app, 'D');
    assert_eq!(
        app.update(Msg::RunList(RunListEvent::Removed { dir: dir(B) })),
        [Effect::UnwatchRun(dir(B))]
    );
    assert_eq!((app.view, app.previous), (View::Devices, View::Runs));
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.view, View::Runs);
}

#[test]
fn run_list_changes_keep_the_selection() {
    let mut app = app();
    select(&mut app, B);
    let mut a = entry(A, "mnist", RunStatus::Completed);
    a.metrics.epochs_done = 3;
    app.update(Msg::RunList(RunListEvent::Changed(a.clone())));
    assert_eq!(app.runs.entry(&dir(A)), Some(&a));
    assert_eq!(app.runs.selected.as_deref(), Some(dir(B).as_path()));
    assert_eq!(app.runs.live_count(), 0);
    app.update(Msg::RunList(RunListEvent::Unreadable(Unreadable {
        dir: dir(B),
        error: "run.json: truncated".into(),
    })));
    assert_eq!(shown_ids(&app), [A, C, D, B]);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(B).as_path()));
}

#[test]
fn run_events_of_the_open_run_fill_its_view() {
    let mut app = app();
    open(&mut app, A);
    let msgs = [
        RunEvent::Log {
            rank: Some(1),
            line: "hello from 1".into(),
        },
        RunEvent::Log {
            rank: Some(0),
            line: "hello from 0".into(),
        },
        RunEvent::Log {
            rank: None,
            line: "supervisor here".into(),
        },
        RunEvent::Metric(metric(MetricKind::Train, 1, 10, 1.5)),
        RunEvent::Metric(metric(MetricKind::Val, 1, 10, 1.2)),
        RunEvent::Supervisor(EventRecord {
            time: NOW,
            event: SupervisorEvent::Completed,
        }),
    ];
    for event in msgs {
        assert_eq!(app.update(Msg::Run { dir: dir(A), event }), []);
    }
    let mut record = run(A).record;
    record.status = RunStatus::Completed;
    app.update(Msg::Run {
        dir: dir(A),
        event: RunEvent::Status(record.clone()),
    });
    // Another run's events are not mixed in.
    app.update(Msg::Run {
        dir: dir(B),
        event: RunEvent::Log {
            rank: Some(0),
            line: "other run".into(),
        },
    });
    app.update(Msg::Spec {
        dir: dir(B),
        text: Ok("other".into()),
    });
    let v = app.run.as_ref().unwrap();
    assert_eq!(v.logs.merged.len(), 3);
    let rank1 = v.logs.buffer(LogTab::Source(LogSource::Rank(1))).unwrap();
    assert_eq!(rank1.len(), 1);
    assert_eq!(
        v.logs
            .buffer(LogTab::Source(LogSource::Supervisor))
            .unwrap()
            .len(),
        1
    );
    assert_eq!(v.metrics.len(), 1);
    assert_eq!(
        v.metrics[&0],
        [
            metric(MetricKind::Train, 1, 10, 1.5),
            metric(MetricKind::Val, 1, 10, 1.2)
        ]
    );
    assert_eq!(v.events.len(), 1);
    assert_eq!(v.events[0].event, SupervisorEvent::Completed);
    assert_eq!(v.record, record);
    assert_eq!(v.spec, None);
    app.update(Msg::Spec {
        dir: dir(A),
        text: Ok("[train]\nepochs = 3\n".into()),
    });
    assert_eq!(
        app.run.as_ref().unwrap().spec,
        Some(Ok("[train]\nepochs = 3\n".into()))
    );
    app.update(Msg::Spec {
        dir: dir(A),
        text: Err("spec.toml: gone".into()),
    });
    assert_eq!(
        app.run.as_ref().unwrap().spec,
        Some(Err("spec.toml: gone".into()))
    );
}

fn wheel(kind: MouseEventKind) -> Msg {
    Msg::Mouse(MouseEvent {
        kind,
        column: 10,
        row: 5,
        modifiers: KeyModifiers::NONE,
    })
}

#[test]
fn mouse_wheel_scrolls_the_runs_selection() {
    let mut app = app();
    let mut more = entries();
    for i in 0..6 {
        more.push(entry(
            &format!("20261001-00000{i}-eeeeee"),
            "mnist",
            RunStatus::Completed,
        ));
    }
    app.update(Msg::RunList(RunListEvent::Snapshot {
        entries: more,
        unreadable: vec![],
    }));
    let selected = |app: &App| {
        let rows = app.runs.rows();
        app.runs.selected_index(&rows)
    };
    assert_eq!(selected(&app), Some(0));
    assert_eq!(app.update(wheel(MouseEventKind::ScrollDown)), []);
    assert_eq!(selected(&app), Some(3));
    app.update(wheel(MouseEventKind::ScrollDown));
    app.update(wheel(MouseEventKind::ScrollDown));
    assert_eq!(selected(&app), Some(9));
    app.update(wheel(MouseEventKind::ScrollDown));
    assert_eq!(selected(&app), Some(9));
    app.update(wheel(MouseEventKind::ScrollUp));
    assert_eq!(selected(&app), Some(6));
    // Clicks and drags do nothing; nor does the wheel under a dialog.
    app.update(wheel(MouseEventKind::Moved));
    assert_eq!(selected(&app), Some(6));
    press_char(&mut app, '?');
    app.update(wheel(MouseEventKind::ScrollUp));
    assert_eq!(selected(&app), Some(6));
    assert_eq!(app.dialog, Some(Dialog::Help));
}

#[test]
fn keys_move_sort_and_group_the_runs() {
    let mut app = app();
    press_char(&mut app, 'j');
    assert_eq!(app.runs.selected.as_deref(), Some(dir(B).as_path()));
    press(&mut app, KeyCode::Down);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(C).as_path()));
    press_char(&mut app, 'k');
    assert_eq!(app.runs.selected.as_deref(), Some(dir(B).as_path()));
    press_char(&mut app, 'G');
    assert_eq!(app.runs.selected.as_deref(), Some(dir(D).as_path()));
    press_char(&mut app, 'g');
    assert_eq!(app.runs.selected.as_deref(), Some(dir(A).as_path()));
    press(&mut app, KeyCode::PageDown);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(D).as_path()));
    press(&mut app, KeyCode::PageUp);
    assert_eq!(app.runs.selected.as_deref(), Some(dir(A).as_path()));
    press_char(&mut app, 'o');
    assert_eq!((app.runs.sort, app.runs.reversed), (SortKey::Status, false));
    assert_eq!(shown_ids(&app), [A, B, D, C]);
    press_char(&mut app, 'O');
    assert!(app.runs.reversed);
    assert_eq!(shown_ids(&app), [C, D, B, A]);
    press_char(&mut app, 'o');
    assert_eq!(
        (app.runs.sort, app.runs.reversed),
        (SortKey::Experiment, false)
    );
    press_char(&mut app, 'x');
    assert!(app.runs.group);
    assert_eq!(app.runs.rows().len(), 6);
    press_char(&mut app, 'x');
    assert!(!app.runs.group);
}

#[test]
fn tick_expires_notices_after_six_seconds() {
    let mut app = app();
    app.notify("hello", false);
    assert_eq!(app.update(Msg::Tick(NOW + 6.0)), []);
    assert_eq!(app.now, NOW + 6.0);
    assert_eq!(app.notice, notice("hello", false));
    app.update(Msg::Tick(NOW + 6.1));
    assert_eq!(app.now, NOW + 6.1);
    assert_eq!(app.notice, None);
    // A newer notice lives 6 s from when it was given.
    app.notify("again", true);
    app.update(Msg::Tick(NOW + 12.0));
    assert_eq!(app.notice.as_ref().unwrap().text, "again");
    app.update(Msg::Tick(NOW + 12.2));
    assert_eq!(app.notice, None);
}

#[test]
fn resize_sets_the_size_and_the_page() {
    let mut app = app();
    assert_eq!(app.update(Msg::Resize(120, 40)), []);
    assert_eq!(app.size, (120, 40));
    assert_eq!(app.page(), 32);
    app.update(Msg::Resize(20, 3));
    assert_eq!(app.page(), 1);
}

#[test]
fn outcomes_become_notices() {
    let mut app = app();
    for (outcome, text, error) in [
        (
            Outcome::Stopping(A.into()),
            format!("stopping run {A} (replicas finish their step)"),
            false,
        ),
        (
            Outcome::Resumed(C.into()),
            format!("resumed run {C}"),
            false,
        ),
        (
            Outcome::Deleted(B.into()),
            format!("deleted run {B}"),
            false,
        ),
        (
            Outcome::TagsSet(B.into()),
            format!("tags of {B} saved"),
            false,
        ),
        (
            Outcome::NotesEdited(B.into()),
            format!("notes of {B} saved"),
            false,
        ),
        (
            Outcome::Failed("no editor".into()),
            "no editor".into(),
            true,
        ),
    ] {
        assert_eq!(app.update(Msg::Done(outcome)), []);
        assert_eq!(app.notice, notice(&text, error));
    }
}

#[test]
fn telemetry_is_kept_with_its_history() {
    use ddp_workspaces::devices::telemetry::{CpuSample, MemorySample, Telemetry};
    let mut app = app();
    let t = Telemetry {
        time: NOW,
        interval_s: 1.0,
        gpus: vec![],
        gpu_note: None,
        cpu: CpuSample {
            per_core_pct: vec![50.0],
            total_pct: 50.0,
        },
        memory: MemorySample {
            total_bytes: 100,
            available_bytes: 25,
        },
        processes: vec![],
        notes: vec![],
    };
    app.update(Msg::Telemetry(t.clone()));
    app.update(Msg::Telemetry(t.clone()));
    assert_eq!(app.telemetry, Some(t));
    assert_eq!(app.history.len(), 2);
    assert_eq!(app.history.cpu_total_pct().to_vec(), [50.0, 50.0]);
    assert_eq!(app.history.memory_used_pct().to_vec(), [75.0, 75.0]);
}

#[test]
fn logs_pane_keys_follow_wrap_tabs_and_search() {
    let mut app = app();
    open(&mut app, A);
    for (rank, line) in [
        (Some(0), "epoch 1 loss 0.5"),
        (Some(1), "epoch 1 loss 0.6"),
        (None, "started"),
    ] {
        app.update(Msg::Run {
            dir: dir(A),
            event: RunEvent::Log {
                rank,
                line: line.into(),
            },
        });
    }
    press_char(&mut app, '2');
    let view = |app: &App| {
        let v = app.run.as_ref().unwrap();
        v.logs.view(v.logs.tab).cloned().unwrap_or_default()
    };
    assert!(view(&app).follow && !view(&app).wrap);
    assert_eq!(press_char(&mut app, 'f'), []);
    assert!(!view(&app).follow);
    press_char(&mut app, 'f');
    assert!(view(&app).follow);
    assert_eq!(press_char(&mut app, 'w'), []);
    assert!(view(&app).wrap);
    press_char(&mut app, 'w');
    assert!(!view(&app).wrap);

    // `/` + text + Enter searches the current log.
    assert_eq!(press_char(&mut app, '/'), []);
    assert_eq!(
        app.dialog,
        Some(Dialog::Search {
            input: InputLine::default()
        })
    );
    type_text(&mut app, "LOSS");
    assert_eq!(view(&app).search_query(), None, "searched on Enter only");
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    assert_eq!(app.dialog, None);
    assert_eq!(view(&app).search_query(), Some("LOSS"));
    assert_eq!(view(&app).search_status().as_deref(), Some("/LOSS  2 of 2"));
    // `n` is the next match here, not a new run.
    assert_eq!(press_char(&mut app, 'n'), []);
    assert_eq!(app.dialog, None);
    assert_eq!(view(&app).search_status().as_deref(), Some("/LOSS  1 of 2"));
    assert_eq!(press_char(&mut app, 'N'), []);
    assert_eq!(view(&app).search_status().as_deref(), Some("/LOSS  2 of 2"));
    // Esc cancels a search being typed, keeping the previous one.
    press_char(&mut app, '/');
    type_text(&mut app, "zzz");
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.dialog, None);
    assert_eq!(view(&app).search_query(), Some("LOSS"));
    assert_eq!(app.view, View::Run);

    // ] [ → ← switch the log tab: all, rank 0, rank 1, supervisor.
    let tab = |app: &App| app.run.as_ref().unwrap().logs.tab;
    assert_eq!(tab(&app), LogTab::Merged);
    press_char(&mut app, ']');
    assert_eq!(tab(&app), LogTab::Source(LogSource::Rank(0)));
    press(&mut app, KeyCode::Right);
    assert_eq!(tab(&app), LogTab::Source(LogSource::Rank(1)));
    press_char(&mut app, ']');
    assert_eq!(tab(&app), LogTab::Source(LogSource::Supervisor));
    press_char(&mut app, ']');
    assert_eq!(tab(&app), LogTab::Merged);
    press_char(&mut app, '[');
    assert_eq!(tab(&app), LogTab::Source(LogSource::Supervisor));
    press(&mut app, KeyCode::Left);
    assert_eq!(tab(&app), LogTab::Source(LogSource::Rank(1)));
    // Each tab has its own state.
    assert!(view(&app).search_query().is_none());
}

#[test]
fn charts_events_and_spec_panes_keys() {
    let mut app = app();
    open(&mut app, A);
    let chart = |app: &App| app.run.as_ref().unwrap().chart;
    let before = chart(&app);
    press_char(&mut app, '+');
    assert_eq!(chart(&app).smoothing, before.smoothing + 1);
    press_char(&mut app, '-');
    press_char(&mut app, '-');
    assert_eq!(chart(&app).smoothing, before.smoothing - 1);
    press_char(&mut app, 'l');
    assert!(chart(&app).log_loss);
    press_char(&mut app, 'X');
    assert_eq!(chart(&app).x, ddp_workspaces::curves::XAxis::Epoch);

    for i in 0..5 {
        app.update(Msg::Run {
            dir: dir(A),
            event: RunEvent::Supervisor(EventRecord {
                time: NOW + i as f64,
                event: SupervisorEvent::Stopped,
            }),
        });
    }
    press_char(&mut app, '3');
    let events_scroll = |app: &App| app.run.as_ref().unwrap().events_scroll;
    press_char(&mut app, 'j');
    press_char(&mut app, 'j');
    assert_eq!(events_scroll(&app), 2);
    press_char(&mut app, 'G');
    assert_eq!(events_scroll(&app), 4);
    press_char(&mut app, 'j');
    assert_eq!(events_scroll(&app), 4);
    press_char(&mut app, 'k');
    assert_eq!(events_scroll(&app), 3);
    press_char(&mut app, 'g');
    assert_eq!(events_scroll(&app), 0);

    press_char(&mut app, '4');
    let spec_scroll = |app: &App| app.run.as_ref().unwrap().spec_scroll;
    press_char(&mut app, 'j');
    assert_eq!(spec_scroll(&app), 0, "no spec yet");
    app.update(Msg::Spec {
        dir: dir(A),
        text: Ok("a = 1\nb = 2\nc = 3\n".into()),
    });
    press(&mut app, KeyCode::PageDown);
    assert_eq!(spec_scroll(&app), 2);
    press(&mut app, KeyCode::Up);
    assert_eq!(spec_scroll(&app), 1);
    assert_eq!(app.view, View::Run);
}

#[test]
fn the_context_follows_the_view_and_pane() {
    use crate::keys::Context;
    let mut app = app();
    assert_eq!(app.context(), Context::Runs);
    open(&mut app, A);
    assert_eq!(app.context(), Context::Run(Pane::Charts));
    press_char(&mut app, '2');
    assert_eq!(app.context(), Context::Run(Pane::Logs));
    press_char(&mut app, 'D');
    assert_eq!(app.context(), Context::Devices);
}
