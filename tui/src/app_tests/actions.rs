//! Run actions: stop, delete, resume (each asks first where it must, and refuses what cannot
//! be done), tags and notes.

use super::*;

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
fn resume_only_a_stopped_failed_or_paused_run() {
    let mut app = app();
    for (id, status) in [(A, "running"), (B, "completed")] {
        select(&mut app, id);
        assert_eq!(press_char(&mut app, 'r'), []);
        assert_eq!(
            app.notice,
            notice(
                &format!(
                    "run {id} is {status}: only a stopped, failed or paused run can be resumed"
                ),
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
