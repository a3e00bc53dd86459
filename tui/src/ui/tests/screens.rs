//! Every view and dialog at once: the footer, small and odd sizes, `NO_COLOR`.

use super::*;

#[test]
fn footer_shows_the_keys_or_a_notice() {
    let mut app = app_with_runs(120, 30);
    let s = screen(&app, 120, 30);
    assert_eq!(
        s[29],
        " Enter open run  / filter  c compare marked runs  n new run  s stop (asks)  r resume  ? help  Esc back"
    );
    app.update(Msg::Done(Outcome::Deleted(B.into())));
    assert_eq!(screen(&app, 120, 30)[29], format!(" deleted run {B}"));
    app.update(Msg::Tick(NOW + 7.0));
    assert!(screen(&app, 120, 30)[29].starts_with(" Enter open run"));
    // Very narrow: `? help` still.
    assert_eq!(screen(&app, 12, 10)[9], " ? help");
}

/// Every view, pane and dialog, by name, with the text that says which it is.
fn every_screen(w: u16, h: u16) -> Vec<(&'static str, App, String)> {
    let mut out = Vec::new();
    let mut empty = app_sized(w, h);
    out.push(("reading", app_sized(w, h), "Reading /ws".to_string()));
    empty.update(Msg::RunList(RunListEvent::Snapshot {
        entries: vec![],
        unreadable: vec![],
    }));
    out.push(("empty", empty, " Runs sorted by created".into()));
    out.push((
        "runs",
        app_with_runs(w, h),
        " Runs sorted by created".into(),
    ));
    for (p, tab) in ["1", "2", "3", "4"]
        .into_iter()
        .zip(["Charts", "Logs", "Events", "Spec"])
    {
        let mut app = run_app(w, h);
        add_metrics(&mut app);
        add_logs(&mut app);
        add_events(&mut app);
        app.update(Msg::Spec {
            dir: dir("mnist", A),
            text: Ok("[train]\nepochs = 3\n".into()),
        });
        keys(&mut app, p);
        assert_eq!(app.run.as_ref().unwrap().pane.name(), tab);
        out.push((tab, app, format!(" Run {A}")));
    }
    let mut devices = app_with_runs(w, h);
    keys(&mut devices, "D");
    devices.update(Msg::Telemetry(cpu_telemetry()));
    out.push(("devices", devices, " Devices ".into()));
    let mut gpus = app_with_runs(w, h);
    keys(&mut gpus, "D");
    gpus.update(Msg::Telemetry(gpu_telemetry()));
    out.push(("gpus", gpus, " Devices ".into()));
    out.push(("compare", compare_app(w, h), " Compare 2 runs ".into()));
    out.push((
        "sweep",
        super::sweep::sweep_app(w, h),
        " Sweep 20261104-110000-ssssss ".into(),
    ));
    for (name, typed, title) in [
        ("help", "?", "Keys (any key closes)"),
        ("confirm", "s", " Confirm "),
        ("new run", "n", " New run "),
        ("tags", "t", " Tags "),
        ("filter", "/mn", "filter /mn"),
    ] {
        let mut app = app_with_runs(w, h);
        keys(&mut app, typed);
        out.push((name, app, title.into()));
    }
    let mut search = run_app(w, h);
    keys(&mut search, "2/x");
    out.push(("search", search, "search /x".into()));
    out
}

#[test]
fn every_view_and_dialog_is_usable_at_80x24() {
    for (name, app, title) in every_screen(80, 24) {
        let s = screen(&app, 80, 24);
        assert_has(&s, &title);
        if !matches!(name, "help" | "confirm" | "new run" | "tags") {
            assert!(s[0].starts_with(" ddp  Runs "), "{name}: {}", s[0]);
        }
        if !matches!(name, "filter" | "search") {
            assert!(
                s[23].contains("? help") || name == "help",
                "{name}: {}",
                s[23]
            );
        }
        if let "Charts" | "Logs" | "Events" | "Spec" = name {
            assert_has(&s, " 1 Charts  2 Logs  3 Events  4 Spec");
            assert_has(&s, "running    epoch 2/3");
        }
    }
}

#[test]
fn odd_sizes_never_panic() {
    for (w, h) in [
        (1, 1),
        (2, 2),
        (10, 3),
        (20, 5),
        (40, 10),
        (79, 23),
        (250, 80),
    ] {
        for (name, app, _) in every_screen(w, h) {
            let buf = draw(&app, w, h);
            assert_eq!(buf.area.width, w, "{name}");
        }
    }
}

/// Cells with a foreground or background colour.
fn coloured_cells(buf: &Buffer) -> Vec<(u16, u16, Color, Color)> {
    let a = buf.area;
    let mut out = Vec::new();
    for y in a.top()..a.bottom() {
        for x in a.left()..a.right() {
            let c = &buf[(x, y)];
            if c.fg != Color::Reset || c.bg != Color::Reset {
                out.push((x, y, c.fg, c.bg));
            }
        }
    }
    out
}

#[test]
fn no_color_leaves_every_cell_uncoloured() {
    let mut app = app_with_runs(120, 30);
    keys(&mut app, " ");
    app.notify("a notice", true);
    let buf = draw(&app, 120, 30);
    assert_eq!(coloured_cells(&buf), []);
    // The selection and the mark stay visible without colour.
    let s = rows(&buf);
    let selected = s.iter().position(|l| l.contains("120000-bbbbbb")).unwrap();
    assert!(
        buf[(5, selected as u16)]
            .modifier
            .contains(ratatui::style::Modifier::REVERSED)
    );
    assert!(s.iter().any(|l| l.starts_with("● running")), "{}", text(&s));
    // And in every other view and dialog.
    for (name, app, _) in every_screen(100, 30) {
        let buf = draw(&app, 100, 30);
        assert_eq!(coloured_cells(&buf), [], "{name}:\n{}", text(&rows(&buf)));
    }
    // With colour there is some.
    let mut app = app_with_runs(120, 30);
    app.theme = Theme { color: true };
    assert_ne!(coloured_cells(&draw(&app, 120, 30)), []);
}
