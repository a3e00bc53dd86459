//! Moving around: opening runs and panes, selection, filter, marks, compare, devices, help,
//! quitting, the mouse, sorting, resizing, and each pane's keys.

use super::*;

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
fn resize_sets_the_size_and_the_page() {
    let mut app = app();
    assert_eq!(app.update(Msg::Resize(120, 40)), []);
    assert_eq!(app.size, (120, 40));
    assert_eq!(app.page(), 32);
    app.update(Msg::Resize(20, 3));
    assert_eq!(app.page(), 1);
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
    assert_eq!(chart(&app).x, ddp_workspaces::present::curves::XAxis::Epoch);

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
