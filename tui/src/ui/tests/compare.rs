//! The Compare view: the differing keys and the charts of the compared runs.

use super::*;

#[test]
fn compare_shows_the_differing_keys_and_values() {
    let mut app = app_with_runs(100, 30);
    keys(&mut app, "  c");
    let s = screen(&app, 100, 30);
    assert_has(&s, " Reading the specs …");
    app.update(Msg::CompareSpecs(Err("spec.toml of x: unreadable".into())));
    assert_has(&screen(&app, 100, 30), " spec.toml of x: unreadable");

    let app = compare_app(100, 30);
    let s = screen(&app, 100, 30);
    assert_eq!(s[0], " ddp  Runs Devices Compare  3 runs, 1 live  /ws");
    assert_eq!(s[1], format!(" Compare 2 runs {}", "─".repeat(84)));
    assert_rows(
        &s,
        21,
        &[
            &format!(" 2 differing spec keys {}", "─".repeat(77)),
            "             aaaaaa                   wide",
            "status       running                  completed",
            "best val     -                        -",
            "test         -                        -",
            "train loss   -                        -",
            "model.hidden 128                      256",
            "train.lr     0.01                     -",
        ],
    );
    // Identical specs are said to be.
    let mut app = compare_app(100, 30);
    app.update(Msg::CompareSpecs(Ok(Comparison {
        sweep: None,
        differing_keys: vec![],
        runs: vec![],
    })));
    let s = screen(&app, 100, 30);
    assert_has(&s, " 0 differing spec keys ");
    assert_has(&s, "the specs are identical");
}

#[test]
fn compare_charts_follow_the_runs_metrics() {
    let mut app = compare_app(100, 40);
    for step in 1..=10u64 {
        app.update(Msg::Run {
            dir: dir("mnist", A),
            event: RunEvent::Metric(metric(MetricKind::Train, 1, step, 1.0 / step as f64, None)),
        });
    }
    app.update(Msg::Run {
        dir: dir("mnist", A),
        event: RunEvent::Metric(metric(MetricKind::Val, 1, 10, 0.3, Some(0.8))),
    });
    let s = screen(&app, 100, 40);
    // A legend entry per run, named by its label.
    assert_has(&s, "aaaaaa");
    assert_has(&s, "aaaaaa val");
    assert_has(&s, "best val     80.00%");
}

#[test]
fn compared_language_models_chart_perplexity_with_their_figures() {
    let mut app = compare_app(100, 40);
    for dir in [dir("mnist", A), dir("cifar", B)] {
        for m in test_util::lm_metrics() {
            app.update(Msg::Run {
                dir: dir.clone(),
                event: RunEvent::Metric(m),
            });
        }
    }
    let s = screen(&app, 100, 40);
    assert_has(&s, "┌ perplexity smoothing 0.60 ─");
    assert_lacks(&s, "accuracy");
    assert_has(&s, "aaaaaa val 4.263");
    // No accuracy rows: language models have none.
    assert_rows(
        &s,
        30,
        &[
            &format!(" 2 differing spec keys {}", "─".repeat(77)),
            "             aaaaaa                   wide",
            "status       running                  completed",
            "train loss   1.4000                   1.4000",
            "val loss     1.4500                   1.4500",
            "perplexity   4.26                     4.26",
            "tokens/s     16640                    16640",
            "model.hidden 128                      256",
            "train.lr     0.01                     -",
        ],
    );
}
