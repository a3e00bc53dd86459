//! The dialogs: help, confirmations, new run, tags, filter and search.

use super::*;

#[test]
fn help_lists_the_keys() {
    let mut app = app_with_runs(120, 40);
    keys(&mut app, "?");
    let s = screen(&app, 120, 40);
    assert_has(&s, "┌ Keys (any key closes) ─");
    for (k, what) in [
        ("?", "help"),
        ("Esc", "back"),
        ("q", "quit (runs keep running)"),
        ("Enter", "open run"),
        ("/", "filter"),
        ("Space", "mark for compare"),
        ("s", "stop (asks)"),
        ("D", "devices"),
        ("Tab", "next pane"),
        ("f", "follow"),
        ("n N", "next / previous match"),
    ] {
        assert_has(&s, &format!("{k:<13}{what}"));
    }
    for section in ["Runs", "Run: charts", "Run: logs", "Compare"] {
        assert!(
            s.iter().any(|l| l.contains(&format!(" {section} ")) || l.contains(&format!("│{section} "))),
            "{section}:\n{}",
            text(&s)
        );
    }
    assert_has(&s, "Events, Spec: ↑ ↓ PgUp PgDn scroll");
    // At 80×24 the common keys are still there.
    let s = screen(&app, 80, 24);
    for k in [
        "│?            help",
        "│Esc          back",
        "│q            quit",
        "│Enter        open run",
    ] {
        assert_has(&s, k);
    }
}

#[test]
fn confirm_dialogs_ask_the_question() {
    let mut app = app_with_runs(80, 24);
    keys(&mut app, "s");
    let s = screen(&app, 80, 24);
    assert_has(&s, "┌ Confirm ─");
    assert_has(&s, &format!("│ Stop run {A} (mnist)? The replicas    │"));
    assert_has(
        &s,
        "│ finish their step and exit.                              │",
    );
    assert_has(
        &s,
        "│ y yes   n no                                             │",
    );
    key(&mut app, KeyCode::Char('n'));
    assert_lacks(&screen(&app, 80, 24), "Confirm");
    keys(&mut app, "jd");
    let s = screen(&app, 120, 30);
    assert_has(&s, &format!("│ Delete run {B} (cifar) and its folder │"));
    assert_has(&s, &format!("│ /ws/experiments/cifar/runs/{B}?       │"));
}

#[test]
fn new_run_dialog_idle_busy_and_refused() {
    let mut app = app_with_runs(80, 24);
    keys(&mut app, "n");
    let s = screen(&app, 80, 24);
    assert_has(&s, "┌ New run ─");
    assert_has(
        &s,
        "│ ddp run SPEC [--set KEY=VALUE]... [--replicas N] [--trainer PATH] [--name",
    );
    assert_has(&s, "│ Tab completes paths   Enter starts   Esc cancels");
    keys(&mut app, "examples/m");
    key(&mut app, KeyCode::Tab);
    app.update(Msg::Completions {
        typed: "examples/m".into(),
        options: vec!["examples/mlp.toml".into(), "examples/mnist.toml".into()],
    });
    let s = screen(&app, 80, 24);
    assert_has(&s, "│ > examples/m ");
    assert_has(&s, "│ mlp.toml  mnist.toml ");
    keys(&mut app, "nist.toml");
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 80, 24);
    assert_has(&s, "│ > examples/mnist.toml ");
    assert_has(&s, "│ checking the spec and starting … ");
    app.update(Msg::Done(Outcome::StartRefused(
        "spec examples/mnist.toml: no such file".into(),
    )));
    let s = screen(&app, 80, 24);
    assert_has(&s, "│ spec examples/mnist.toml: no such file ");
    assert_has(&s, "│ nothing was created ");
    assert_lacks(&s, "checking the spec");
}

#[test]
fn tags_filter_and_search_lines() {
    let mut app = app_with_runs(80, 24);
    keys(&mut app, "t");
    let s = screen(&app, 80, 24);
    assert_has(&s, "┌ Tags ─");
    assert_has(&s, &format!("│ Tags of run {A} (separated by spaces):"));
    assert_has(&s, "│ > baseline lr-sweep ");
    assert_has(&s, "│ Enter saves   Esc cancels ");
    key(&mut app, KeyCode::Esc);
    // The filter line replaces the footer and narrows as typed.
    keys(&mut app, "/cif");
    let s = screen(&app, 80, 24);
    assert_eq!(s[23], "filter /cif");
    assert!(s[1].contains("filter /cif"), "{}", s[1]);
    assert_eq!(
        s[3],
        "  completed  cifar/wide   120000-bbbbbb  3/3  ██████ -                50.00%"
    );
    assert_eq!(s[4], "");
    key(&mut app, KeyCode::Enter);
    assert_eq!(
        screen(&app, 80, 24)[23],
        " Enter open run  / filter  c compare marked runs  n new run  ? help"
    );
    // The search line of the Logs pane.
    let mut app = run_app(80, 24);
    keys(&mut app, "2/rank 1");
    assert_eq!(screen(&app, 80, 24)[23], "search /rank 1");
}
