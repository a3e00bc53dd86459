//! What comes from outside the keyboard: run-list and run events, ticks, action outcomes,
//! telemetry.

use super::*;

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
    use ddp_workspaces::engine::devices::telemetry::{CpuSample, MemorySample, Telemetry};
    let mut app = app();
    let t = Telemetry::sample()
        .time(NOW)
        .cpu(CpuSample {
            per_core_pct: vec![50.0],
            total_pct: 50.0,
        })
        .memory(MemorySample {
            total_bytes: 100,
            available_bytes: 25,
        })
        .processes(vec![]);
    app.update(Msg::Telemetry(t.clone()));
    app.update(Msg::Telemetry(t.clone()));
    assert_eq!(app.devices.telemetry, Some(t));
    assert_eq!(app.devices.history.len(), 2);
    assert_eq!(app.devices.history.cpu_total_pct().to_vec(), [50.0, 50.0]);
    assert_eq!(app.devices.history.memory_used_pct().to_vec(), [75.0, 75.0]);
}
