//! Tests of the run card, from hand-made records and events.

use ddp_workspaces::metrics::MetricKind;
use ddp_workspaces::runs::run::{EventRecord, SupervisorEvent};
use ddp_workspaces::test_util::{lm_metrics, lm_run_in};
use ddp_workspaces::{RunEvent, RunStatus};

use super::card::Card;
use super::tests::{metric, record};
use super::text::{clean_line, text_bar};

const ID: &str = "20261121-120857-ad4c4d";

fn log(rank: usize, line: &str) -> RunEvent {
    RunEvent::Log {
        rank: Some(rank),
        line: line.into(),
    }
}

/// A running card after one validated epoch of 20 steps (of 2), at 1 step/s.
fn half_done() -> Card {
    let mut card = Card::from_record(record(ID, RunStatus::Running), Some(2), None);
    for m in [
        metric(MetricKind::Train, 1, 10, 100.0),
        metric(MetricKind::Train, 1, 20, 110.0),
        metric(MetricKind::Val, 1, 20, 112.0),
    ] {
        assert!(card.apply(&RunEvent::Metric(m)));
    }
    card
}

fn line<'a>(plain: &'a str, key: &str) -> &'a str {
    plain
        .lines()
        .find(|l| l.starts_with(&format!("{key:<12}")))
        .unwrap_or_else(|| panic!("no line {key:?} in\n{plain}"))
}

#[test]
fn running_to_completed() {
    let mut card = Card::from_record(record(ID, RunStatus::Running), Some(2), None);
    assert!(!card.apply(&RunEvent::Status(record(ID, RunStatus::Running))));
    let o = card.render();
    assert_eq!(line(&o.plain, "epoch"), "epoch       -/2  step 0");
    assert_eq!(line(&o.plain, "progress"), "progress    [..........] 0%");
    assert_eq!(line(&o.plain, "ETA"), "ETA         -");
    assert!(
        !o.html.as_ref().unwrap().contains("ddp-chart"),
        "no chart without records"
    );

    let mut card = half_done();
    let mut other = metric(MetricKind::Train, 1, 20, 110.0);
    other.rank = 1;
    assert!(
        !card.apply(&RunEvent::Metric(other)),
        "rank 1's metrics are not shown"
    );
    assert_eq!(card.total_steps(), Some(40));
    assert_eq!(card.progress(), Some(0.5));
    assert_eq!(card.eta_s(), Some(20.0));
    for i in 0..10 {
        assert!(card.apply(&log(0, &format!("line {i}"))));
    }
    assert!(card.apply(&log(1, "rank one says hi")));
    let o = card.render();
    let p = &o.plain;
    assert!(p.starts_with(&format!(
        "run         {ID}\nexperiment  mnist\nstatus      running\n"
    )));
    assert_eq!(line(p, "epoch"), "epoch       1/2  step 20/40");
    assert_eq!(line(p, "progress"), "progress    [#####.....] 50%");
    assert_eq!(line(p, "samples/s"), "samples/s   1000");
    assert_eq!(line(p, "ETA"), "ETA         20.0s");
    assert_eq!(line(p, "restarts"), "restarts    0");
    assert_eq!(line(p, "rank 0"), "rank 0      line 9");
    assert_eq!(line(p, "rank 1"), "rank 1      rank one says hi");
    let h = o.html.unwrap();
    assert!(h.contains("class=\"ddp-card\"") && h.contains("ddp-status-running"));
    assert!(h.contains("width:50.0%"), "{h}");
    assert!(h.contains("ddp-chart"), "chart once there are records");
    assert!(
        !h.contains("<svg"),
        "never an inline SVG: sanitisers strip it"
    );
    // Only the last 8 lines of rank 0.
    assert!(
        h.contains("line 2\nline 3") && !h.contains("line 1\n"),
        "{h}"
    );
    assert_eq!(h.matches("<details>").count(), 2);
    assert!(!card.is_final());

    // Rendering again is the same; a new record redraws the chart.
    assert_eq!(card.render(), card.render());
    let before = card.render();
    let mut test = metric(MetricKind::Test, 2, 40, 130.0);
    test.accuracy = Some(0.969);
    assert!(card.apply(&RunEvent::Metric(test)));
    assert_ne!(card.render().html, before.html);

    let mut done = record(ID, RunStatus::Completed);
    done.ended = Some(108.9);
    assert!(card.apply(&RunEvent::Status(done.clone())));
    assert!(!card.apply(&RunEvent::Status(done)));
    assert!(card.is_final());
    let o = card.render();
    assert_eq!(line(&o.plain, "status"), "status      completed");
    assert_eq!(line(&o.plain, "progress"), "progress    [##########] 100%");
    assert_eq!(
        line(&o.plain, "test"),
        "test        accuracy 96.90%  loss 0.0488"
    );
    assert_eq!(line(&o.plain, "duration"), "duration    8.9s");
    assert!(!o.plain.contains("\nETA"));
    let h = o.html.unwrap();
    assert!(h.contains("test: accuracy 96.90%") && h.contains("ddp-status-completed"));
}

#[test]
fn failed_shows_the_error_escaped() {
    let mut card = half_done();
    let mut failed = record(ID, RunStatus::Failed);
    failed.error = Some("rank 1 exited with code 1 <oops>".into());
    failed.restarts = 3;
    assert!(card.apply(&RunEvent::Status(failed)));
    let o = card.render();
    assert_eq!(
        line(&o.plain, "error"),
        "error       rank 1 exited with code 1 <oops>"
    );
    assert_eq!(line(&o.plain, "restarts"), "restarts    3");
    assert_eq!(line(&o.plain, "progress"), "progress    [#####.....] 50%");
    let h = o.html.unwrap();
    assert!(
        h.contains("error: rank 1 exited with code 1 &lt;oops&gt;"),
        "{h}"
    );
    assert!(h.contains("ddp-status-failed") && h.contains("restarts 3"));
    assert!(card.is_final());
    assert_eq!(card.eta_s(), None);
}

#[test]
fn stopped_says_how_to_resume() {
    let mut card = half_done();
    let stopped = RunEvent::Supervisor(EventRecord {
        time: 2.0,
        event: SupervisorEvent::Stopped,
    });
    assert!(card.apply(&stopped));
    assert!(card.apply(&RunEvent::Status(record(ID, RunStatus::Stopped))));
    let o = card.render();
    assert_eq!(line(&o.plain, "status"), "status      stopped");
    assert_eq!(
        line(&o.plain, "resume"),
        format!("resume      %ddp resume {ID}")
    );
    // "stopped" once: the status says it; the outcome says how to resume; no event repeats it.
    assert_eq!(o.plain.matches("stopped").count(), 1, "{}", o.plain);
    let h = o.html.unwrap();
    assert!(
        h.contains(&format!("resume with <code>%ddp resume {ID}</code>")),
        "{h}"
    );
    assert_eq!(
        h.matches("stopped").count(),
        2,
        "the badge's class and text: {h}"
    );
    assert!(h.contains(">stopped</span>"));
    assert!(card.is_final());
}

#[test]
fn log_lines_are_escaped_and_cleaned() {
    let mut card = Card::from_record(record(ID, RunStatus::Running), None, None);
    assert!(card.apply(&log(0, "<script>alert('x')</script>")));
    assert!(card.apply(&RunEvent::Log {
        rank: None,
        line: "supervisor: started & running".into(),
    }));
    let o = card.render();
    let h = o.html.unwrap();
    assert!(!h.contains("<script>"), "{h}");
    assert!(h.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(h.contains("supervisor · <code>supervisor: started &amp; running</code>"));
    assert_eq!(
        line(&o.plain, "rank 0"),
        "rank 0      <script>alert('x')</script>"
    );
    assert_eq!(line(&o.plain, "progress"), "progress    -");
    assert_eq!(line(&o.plain, "epoch"), "epoch       -/-  step 0");

    assert_eq!(clean_line("\x1b[32mok\x1b[0m done"), "ok done");
    assert_eq!(clean_line("10%\r20%\r"), "20%");
    assert_eq!(clean_line("a\tb\x07"), "a\tb");
    assert_eq!(clean_line(&"x".repeat(1200)).chars().count(), 1001);
}

#[test]
fn supervisor_events_and_rate_after_a_restart() {
    let mut card = Card::from_record(record(ID, RunStatus::Running), Some(10), Some(100));
    let restarting = RunEvent::Supervisor(EventRecord {
        time: 1.0,
        event: SupervisorEvent::Restarting {
            attempt: 2,
            after_s: 1.0,
            reason: "rank 1 exited with code 75".into(),
        },
    });
    assert!(card.apply(&restarting));
    assert!(
        !card.apply(&restarting),
        "the same event again changes nothing"
    );
    let p = card.render().plain;
    assert_eq!(
        line(&p, "event"),
        "event       restarting (attempt 2) in 1s: rank 1 exited with code 75"
    );
    for (step, time) in [(10, 100.0), (20, 110.0), (15, 200.0), (25, 205.0)] {
        card.apply(&RunEvent::Metric(metric(MetricKind::Train, 1, step, time)));
    }
    // max_steps is the plan until an epoch is validated; the rate counts from the resume.
    assert_eq!(card.total_steps(), Some(100));
    assert_eq!(card.eta_s(), Some(75.0 / 2.0));
    assert!(!card.apply(&RunEvent::Unparsed {
        path: "m".into(),
        line: "x".into(),
        error: "bad".into(),
    }));
}

#[test]
fn new_reads_the_plan_from_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        "name = \"m\"\n[train]\nepochs = 3\nmax_steps = 50\n",
    )
    .unwrap();
    let run = record(ID, RunStatus::Running).in_dir(dir.path());
    let mut card = Card::new(&run);
    card.apply(&RunEvent::Metric(metric(MetricKind::Train, 1, 10, 1.0)));
    assert_eq!(card.total_steps(), Some(50));
    assert_eq!(card.progress(), Some(0.2));
    assert!(card.render().plain.contains("epoch       1/3  step 10/50"));

    let missing = record(ID, RunStatus::Queued).in_dir(dir.path().join("nope"));
    assert_eq!(Card::new(&missing).progress(), None);
}

#[test]
fn a_language_models_card_counts_steps_and_shows_perplexity() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = lm_run_in(dir.path());
    run.record.status = RunStatus::Running;
    run.record.ended = None;
    // The plan of its spec: 2000 steps, no epochs.
    let mut card = Card::new(&run);
    for m in lm_metrics() {
        assert!(card.apply(&RunEvent::Metric(m)));
    }
    assert_eq!(card.total_steps(), Some(2000));
    assert_eq!(card.progress(), Some(0.6));
    // 800 steps in the 80 s from step 400 to 1200: 800 more take 80 s.
    assert_eq!(card.eta_s(), Some(80.0));
    let o = card.render();
    assert_eq!(
        o.plain,
        "run         20261121-101500-abc123\n\
         experiment  gpt-shakespeare\n\
         status      running\n\
         step        1200/2000\n\
         progress    [######....] 60%\n\
         tokens/s    16640\n\
         lr          0.0005\n\
         ETA         1m20s\n\
         restarts    0\n\
         devices     cpu\n\
         val         loss 1.4500  perplexity 4.26  bits/char 2.092\n"
    );
    let h = o.html.unwrap();
    assert!(
        h.contains(
            "<div>step 1200/2000 · 16640 tokens/s · lr 0.0005 · ETA 1m20s · restarts 0</div>"
        ),
        "{h}"
    );
    assert!(
        h.contains("<div>val loss 1.4500  perplexity 4.26  bits/char 2.092</div>"),
        "{h}"
    );
    let (img, svg) = chart_svg(&h);
    assert!(img.ends_with("alt=\"loss and perplexity of run 20261121-101500-abc123\">"));
    assert!(svg.contains("perplexity") && !svg.contains("accuracy"));
    assert!(!h.contains("samples/s") && !h.contains("epoch"), "{h}");

    // Completed: its last validation is its figure; there is no test.
    let mut done = run.record.clone();
    done.status = RunStatus::Completed;
    done.ended = Some(run.record.started.unwrap() + 125.0);
    assert!(card.apply(&RunEvent::Status(done)));
    let p = card.render().plain;
    assert_eq!(line(&p, "progress"), "progress    [##########] 100%");
    assert_eq!(line(&p, "duration"), "duration    2m05s");
    assert_eq!(
        line(&p, "val"),
        "val         loss 1.4500  perplexity 4.26  bits/char 2.092"
    );
    assert!(!p.contains("\ntest") && !p.contains("accuracy"), "{p}");
}

#[test]
fn text_bars() {
    assert_eq!(text_bar(None), "-");
    assert_eq!(text_bar(Some(0.5)), "[#####.....] 50%");
    assert_eq!(text_bar(Some(1.7)), "[##########] 100%");
    assert_eq!(text_bar(Some(f64::NAN)), "-");
}

/// The chart's `<img>` in a card's HTML, decoded back to its SVG.
pub(super) fn chart_svg(html: &str) -> (String, String) {
    use base64::Engine as _;
    let start = html
        .find("<img class=\"ddp-chart\"")
        .expect("a chart image");
    let img = &html[start..start + html[start..].find('>').unwrap() + 1];
    let prefix = "src=\"data:image/svg+xml;base64,";
    let data = &img[img.find(prefix).unwrap() + prefix.len()..];
    let data = &data[..data.find('"').unwrap()];
    let svg = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    (img.to_string(), String::from_utf8(svg).unwrap())
}

/// The smallest `font-size` of an SVG's texts.
pub(super) fn smallest_text(svg: &str) -> f64 {
    svg.split("font-size=\"")
        .skip(1)
        .map(|t| t[..t.find('"').unwrap()].parse::<f64>().unwrap())
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn chart_is_an_image_that_survives_sanitising() {
    let o = half_done().render();
    let (img, svg) = chart_svg(o.html.as_ref().unwrap());
    assert_eq!(
        &img[img.find(" style=").unwrap()..],
        format!(
            " style=\"width:100%;max-width:656px;height:auto\" alt=\"loss and accuracy of run {ID}\">"
        )
    );
    assert!(svg.starts_with("<svg") && svg.contains(r#"width="656" height="300""#));
    assert!(smallest_text(&svg) >= 11.0, "{}", smallest_text(&svg));
}

#[test]
fn devices_once_in_a_few_words() {
    let mut card = half_done();
    let mut r = record(ID, RunStatus::Running);
    r.devices = "CPU, 1 thread(s) per replica (ddp.devices = \"auto\": no NVIDIA driver \
                 (libnvidia-ml.so.1 not found): running on CPU)"
        .into();
    assert!(card.apply(&RunEvent::Status(r)));
    assert!(card.apply(&RunEvent::Supervisor(EventRecord {
        time: 1.0,
        event: SupervisorEvent::Started {
            attempt: 0,
            devices: "CPU, 1 thread(s) per replica (...)".into(),
            resume: false,
        },
    })));
    for l in [
        "no NVIDIA driver (libnvidia-ml.so.1 not found)",
        "ddp.devices = \"auto\": no NVIDIA driver (libnvidia-ml.so.1 not found): running on CPU",
    ] {
        card.apply(&RunEvent::Log {
            rank: None,
            line: l.into(),
        });
    }
    let o = card.render();
    assert_eq!(
        line(&o.plain, "devices"),
        "devices     2 × CPU (no NVIDIA driver)"
    );
    assert_eq!(line(&o.plain, "event"), "event       started attempt 0");
    assert_eq!(o.plain.matches("NVIDIA").count(), 1, "{}", o.plain);
    let h = o.html.unwrap();
    assert!(
        h.contains("<div>devices: 2 × CPU (no NVIDIA driver)</div>"),
        "{h}"
    );
    // The full notes stay in the supervisor's log, folded away; its summary does not repeat them.
    assert!(h.contains("<details><summary>supervisor</summary>"), "{h}");
    assert!(
        h.contains("libnvidia-ml.so.1 not found): running on CPU</pre>"),
        "{h}"
    );
}

#[test]
fn the_step_time_breakdown_shows_as_a_line_and_a_stacked_bar() {
    let mut card = half_done();
    assert!(!card.render().plain.contains("step time"));
    let b = ddp_workspaces::metrics::StepBreakdown {
        step_s: 0.5,
        compute_s: 0.2,
        comm_exposed_s: 0.25,
        data_s: 0.01,
        optimizer_s: 0.03,
        comm_s: 0.4,
        bytes_sent: Some(2.0e6),
    };
    let m = metric(MetricKind::Train, 1, 30, 120.0).breakdown(Some(b));
    assert!(card.apply(&RunEvent::Metric(m)));
    let o = card.render();
    assert_eq!(
        line(&o.plain, "step time"),
        "step time   0.500 s/step: compute 40 %, communication 50 % (0.400 s in all, 0.250 s exposed), data 2 %, optimizer 6 %; 2.0 MB sent; communication-bound"
    );
    let html = o.html.unwrap();
    assert!(html.contains("ddp-stack"), "{html}");
    assert!(
        html.contains("title=\"communication (exposed)\" style=\"background:#f59e0b;width:50.0%"),
        "{html}"
    );
}

#[test]
fn a_mixed_precision_run_shows_its_loss_scale() {
    let mut card = half_done();
    assert!(!card.render().plain.contains("precision"));
    let p = ddp_workspaces::metrics::PrecisionFigures {
        name: "fp16".into(),
        loss_scale: Some(32768.0),
        skipped_steps: Some(2),
    };
    let m = metric(MetricKind::Train, 1, 30, 120.0).precision(Some(p));
    assert!(card.apply(&RunEvent::Metric(m)));
    let o = card.render();
    assert_eq!(
        line(&o.plain, "precision"),
        "precision   fp16, loss scale 32768, 2 steps skipped"
    );
    let html = o.html.unwrap();
    assert!(
        html.contains("<div>precision fp16, loss scale 32768, 2 steps skipped</div>"),
        "{html}"
    );
}

#[test]
fn a_run_taking_local_steps_shows_its_last_sync_and_drift() {
    let mut card = half_done();
    assert!(!card.render().plain.contains("sync"));
    let s = ddp_workspaces::metrics::SyncFigures {
        method: "streaming".into(),
        every: 40,
        encoding: "int8".into(),
        last_sync: 20,
        drift: vec![0.1, 0.2],
    };
    let m = metric(MetricKind::Train, 1, 30, 120.0).sync(Some(s));
    assert!(card.apply(&RunEvent::Metric(m)));
    let o = card.render();
    let want =
        "streaming every 40 steps (int8), last sync at step 20, 10 steps ago, drift 0.100 0.200";
    assert_eq!(line(&o.plain, "sync"), format!("sync        {want}"));
    assert!(o.html.unwrap().contains(&format!("<div>sync {want}</div>")));
}

#[test]
fn a_run_on_spark_names_its_application_and_links_its_web_ui() {
    let mut rec = record(ID, RunStatus::Queued);
    rec.spark = Some(ddp_workspaces::runs::run::SparkApp {
        master: "spark://h:7077".into(),
        tasks: 2,
        waiting: Some("waiting for executors".into()),
        ..Default::default()
    });
    let card = Card::from_record(rec.clone(), Some(2), None);
    let o = card.render();
    assert_eq!(
        line(&o.plain, "spark"),
        "spark       submitted on spark://h:7077 (2 tasks); waiting for executors"
    );
    let app = rec.spark.as_mut().unwrap();
    app.waiting = None;
    app.app_id = Some("app-1".into());
    app.ui = Some("http://h:4040/?a=1&b=<2>".into());
    rec.status = RunStatus::Running;
    let o = Card::from_record(rec, Some(2), None).render();
    assert_eq!(
        line(&o.plain, "spark"),
        "spark       app-1 on spark://h:7077 (2 tasks), UI http://h:4040/?a=1&b=<2>"
    );
    let html = o.html.unwrap();
    assert!(
        html.contains(
            "spark: app-1 on spark://h:7077 (2 tasks) · <a href=\"http://h:4040/?a=1&amp;b=&lt;2&gt;\" target=\"_blank\">Spark UI</a>"
        ),
        "{html}"
    );
}
