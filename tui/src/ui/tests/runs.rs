//! The Runs view: the table, its columns, title, filter, groups and marks.

use super::*;

#[test]
fn empty_workspace_explains_how_to_start_a_run() {
    let mut app = app_sized(80, 24);
    app.update(Msg::RunList(RunListEvent::Snapshot {
        entries: vec![],
        unreadable: vec![],
    }));
    let s = screen(&app, 80, 24);
    assert_rows(
        &s,
        0,
        &[
            " ddp  Runs Devices  0 runs, 0 live  /ws",
            &format!(" Runs sorted by created {}", "─".repeat(56)),
            "",
            "  No runs in /ws yet.",
            "",
            "  Press n to start one from a spec, or in another terminal:",
            "",
            "      ddp run examples/mnist.toml",
            "",
        ],
    );
    assert_has(
        &s,
        "Runs started anywhere (the ddp CLI, a notebook, this dashboard)",
    );
}

#[test]
fn reading_until_the_first_snapshot() {
    let app = app_sized(80, 24);
    let s = screen(&app, 80, 24);
    assert_eq!(s[2], "Reading /ws …");
    assert_lacks(&s, "No runs");
    assert_lacks(&s, "STATUS");
}

#[test]
fn runs_table_at_80x24() {
    let app = app_with_runs(80, 24);
    let s = screen(&app, 80, 24);
    assert_rows(
        &s,
        0,
        &[
            " ddp  Runs Devices  3 runs, 1 live  /ws",
            &format!(" Runs sorted by created {}", "─".repeat(56)),
            "  STATUS     EXPERIMENT   RUN           PROGRESS     TRAIN LOSS       BEST",
            "  running    mnist        120000-aaaaaa  2/3  ████·· 0.1234  █▄▂▁     96.50%",
            "  completed  cifar/wide   120000-bbbbbb  3/3  ██████ -                50.00%",
            "  failed     mnist        120000-cccccc  0/3  ······ -                -",
            "  unreadable broken       20261101-0000 run.json: no",
            "",
        ],
    );
    // Nothing wider than the screen was drawn past it, and the footer fits.
    assert_eq!(
        s[23],
        " Enter open run  / filter  c compare marked runs  n new run  ? help"
    );
}

#[test]
fn runs_table_at_200x60_shows_every_column() {
    let app = app_with_runs(200, 60);
    let s = screen(&app, 200, 60);
    assert_rows(
        &s,
        2,
        &[
            "  STATUS     EXPERIMENT   RUN                    PROGRESS     REPLICAS     RST TRAIN LOSS       BEST    TEST    CREATED             TIME    TAGS",
            "  running    mnist        20261104-120000-aaaaaa  2/3  ████·· 2× cpu       0   0.1234  █▄▂▁     96.50%  -       2026-11-18 11:06:40 1m39s   baseline lr-sweep",
            "  completed  cifar/wide   20261103-120000-bbbbbb  3/3  ██████ 2× cpu       0   -                50.00%  49.00%  2026-11-18 11:06:40 1m00s",
            "  failed     mnist        20261102-120000-cccccc  0/3  ······ 2× cpu       0   -                -       -       2026-11-18 11:06:40 30.0s",
            "  unreadable broken       20261101-000000-zzzzzz run.json: no",
            "",
        ],
    );
    assert_eq!(
        s[59],
        " Enter open run  / filter  c compare marked runs  n new run  s stop (asks)  r resume  ? help  Esc back  q quit (runs keep running)"
    );
}

#[test]
fn runs_title_filter_grouping_and_marks() {
    let mut app = app_with_runs(80, 24);
    keys(&mut app, "/mni");
    key(&mut app, KeyCode::Enter);
    keys(&mut app, "x ");
    let s = screen(&app, 80, 24);
    assert_rows(
        &s,
        1,
        &[
            " Runs sorted by created, grouped by experiment filter /mni 1 marked (c compares)",
            "  STATUS     EXPERIMENT   RUN           PROGRESS     TRAIN LOSS       BEST",
            "  ▾ mnist    2 runs",
            "● running    mnist        120000-aaaaaa  2/3  ████·· 0.1234  █▄▂▁     96.50%",
            "  failed     mnist        120000-cccccc  0/3  ······ -                -",
            "",
        ],
    );
    // Sorting shows in the title; `/` edits the filter; a filter nothing matches says so.
    keys(&mut app, "oO/zzz");
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 80, 24);
    assert!(
        s[1].starts_with(
            " Runs sorted by status (reversed), grouped by experiment filter /mnizzz 1 marked"
        ),
        "{}",
        s[1]
    );
    assert_eq!(s[2], "No run matches the filter /mnizzz (Esc clears it).");
}
