//! The new-run dialog: parsing, refusals, completion.

use super::*;

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
    let request = NewRun {
        spec: "examples/mnist.toml".into(),
        overrides: vec!["train.lr=0.01".into()],
        name: Some("quick one".into()),
        replicas: Some(2),
        command: [
            "ddp-tui",
            "run",
            "examples/mnist.toml",
            "--set",
            "train.lr=0.01",
            "--name",
            "quick one",
            "--replicas",
            "2",
        ]
        .map(String::from)
        .to_vec(),
        ..NewRun::default()
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
                error.as_deref().unwrap().ends_with("not provided: <SPEC>"),
                "{error:?}"
            );
        }
        d => panic!("{d:?}"),
    }
    type_text(&mut app, "a.toml --set x");
    assert_eq!(press(&mut app, KeyCode::Enter), []);
    assert!(matches!(
        &app.dialog,
        Some(Dialog::NewRun { error: Some(e), busy: false, .. }) if e.ends_with("'--set <KEY=VALUE>': expected KEY=VALUE, e.g. train.lr=0.01")
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
fn a_sweep_line_starts_a_sweep_and_opens_its_view() {
    let mut app = app();
    press_char(&mut app, 'n');
    type_text(
        &mut app,
        "sweep s.toml --param train.lr=loguniform:1e-4:1e-1 --trials 4 --scheduler asha",
    );
    let effects = press(&mut app, KeyCode::Enter);
    let [Effect::StartSweep(req)] = &effects[..] else {
        panic!("{effects:?}")
    };
    assert_eq!((req.trials, req.spec.to_str()), (Some(4), Some("s.toml")));
    assert_eq!(
        app.update(Msg::Done(Outcome::SweepStarted("S1".into()))),
        [Effect::WatchSweep("S1".into())]
    );
    assert_eq!(app.dialog, None);
    assert_eq!(app.view, View::Sweep);
    assert_eq!(app.sweep.as_ref().unwrap().id, "S1");
    // Esc leaves it and stops reading the sweep.
    assert_eq!(press(&mut app, KeyCode::Esc), [Effect::UnwatchSweep]);
    assert_eq!(app.view, View::Runs);
}
