//! Tests of `Output`, the tables, `ls`/`show`/`compare`/`plot` and the devices view.

use base64::Engine as _;
use ddp_workspaces::engine::devices::telemetry::{CpuSample, GpuSample, ProcessSample, Telemetry};
use ddp_workspaces::index::IndexedRun;
use ddp_workspaces::metrics::{MetricKind, MetricRecord};
use ddp_workspaces::present::plot::{Series, XAxis};
use ddp_workspaces::present::report::{self, Table};
use ddp_workspaces::test_util;
use ddp_workspaces::{Run, RunRecord, RunStatus};
use serde_json::json;

use super::table::{html_table, status_badge};
use super::{Output, devices, html_escape, runs};

pub(super) fn record(id: &str, status: RunStatus) -> RunRecord {
    RunRecord::sample()
        .id(id)
        .status(status)
        .command(vec!["ddp".into(), "run".into(), "mnist.toml".into()])
        .host("box")
        .devices("")
        .created(0.0)
        .started(Some(100.0))
}

pub(super) fn metric(kind: MetricKind, epoch: usize, step: u64, time: f64) -> MetricRecord {
    let accuracy = (kind != MetricKind::Train).then_some(0.9 + epoch as f64 / 100.0);
    test_util::metric(kind, epoch, step, 2.0 / (1.0 + step as f64), accuracy)
        .time(time)
        .samples_per_sec(500.0)
        .samples(Some(64))
}

/// A run folder in `dir` with a spec (`lr`) and, optionally, rank 0's metrics.
fn run_in(dir: &std::path::Path, id: &str, lr: f64, metrics: &[MetricRecord]) -> Run {
    let run_dir = dir.join(id);
    std::fs::create_dir_all(run_dir.join("metrics")).unwrap();
    let spec = format!("name = \"mnist\"\n[train]\nepochs = 2\nlr = {lr}\n");
    std::fs::write(run_dir.join("spec.toml"), spec).unwrap();
    let lines: String = metrics
        .iter()
        .map(|m| serde_json::to_string(m).unwrap() + "\n")
        .collect();
    std::fs::write(run_dir.join("metrics/rank-0.jsonl"), lines).unwrap();
    record(id, RunStatus::Completed)
        .ended(Some(112.5))
        .in_dir(run_dir)
}

#[test]
fn escapes_html() {
    assert_eq!(
        html_escape(r#"<script>alert('x' & "y")</script>"#),
        "&lt;script&gt;alert(&#39;x&#39; &amp; &quot;y&quot;)&lt;/script&gt;"
    );
    assert_eq!(html_escape("épée 5°C"), "épée 5°C");
}

#[test]
fn mime_bundle() {
    let m = Output::plain("hi").to_mime_map();
    assert_eq!(m.len(), 1);
    assert_eq!(m["text/plain"], "hi");

    let o = Output::rich("t", "<b>t</b>").with_json(json!({"a": [1, 2]}));
    let m = o.to_mime_map();
    assert_eq!(m["text/html"], "<b>t</b>");
    // The JSON value itself, not its text.
    assert_eq!(m["application/json"], json!({"a": [1, 2]}));

    let png = b"\x89PNG\r\n\x1a\nrest".to_vec();
    let m = Output::image("img", "<svg/>".into(), png.clone()).to_mime_map();
    assert_eq!(m["image/svg+xml"], "<svg/>");
    let b64 = m["image/png"].as_str().unwrap();
    let back = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(back, png);
    assert!(!m.contains_key("text/html"));
}

#[test]
fn html_tables_escape_and_colour_statuses() {
    let t = Table::new(
        &["ID", "STATUS", "NOTE"],
        vec![
            vec!["a".into(), "failed".into(), "<b>x</b>".into()],
            vec!["b".into(), "completed".into(), "y & z".into()],
            vec!["c".into(), "weird".into(), String::new()],
        ],
    );
    let h = html_table(&t);
    assert!(h.starts_with("<table class=\"ddp-table\""), "{h}");
    assert!(h.contains(">&lt;b&gt;x&lt;/b&gt;</td>"), "{h}");
    assert!(h.contains(">y &amp; z</td>"));
    assert!(
        h.contains("color:#b91c1c;font-weight:600\">failed</td>"),
        "{h}"
    );
    assert!(h.contains("color:#15803d;font-weight:600\">completed</td>"));
    assert!(h.contains(">weird</td>") && !h.contains("color:#6b7280;font-weight:600\">weird"));
    assert_eq!(h.matches("<tr>").count(), 4);
    assert!(!h.contains("<script") && !h.contains("<style"));

    let b = status_badge(RunStatus::Running);
    assert!(
        b.contains("background:#2563eb") && b.ends_with(">running</span>"),
        "{b}"
    );
}

#[test]
fn ls_show_compare_plain_text_is_the_cli_text() {
    let dir = tempfile::tempdir().unwrap();
    let m = [
        metric(MetricKind::Train, 1, 5, 101.0),
        metric(MetricKind::Val, 1, 10, 102.0),
        metric(MetricKind::Test, 1, 10, 103.0),
    ];
    let mut a = run_in(dir.path(), "20261121-101500-aaaaaa", 0.1, &m);
    a.record.name = Some("<first>".into());
    let b = run_in(dir.path(), "20261121-101600-bbbbbb", 0.2, &[]);
    std::fs::write(a.dir.join("notes.md"), "try <b>more</b>\n").unwrap();

    let listed = [IndexedRun::read(a.clone()), IndexedRun::read(b.clone())];
    let o = runs::ls(&listed);
    assert_eq!(o.plain, report::runs_table(&[&a, &b]).to_text());
    assert!(o.plain.starts_with("ID  "));
    let html = o.html.unwrap();
    assert!(html.contains("&lt;first&gt;") && !html.contains("<first>"));
    assert!(html.contains(">91.00%</td>"), "{html}");
    assert!(runs::ls(&[]).html.unwrap().contains("no runs"));

    let j = runs::ls_json(&listed);
    let arr = j.json.as_ref().unwrap().as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["id"], "20261121-101500-aaaaaa");
    let acc = arr[0]["summary"]["test_accuracy"].as_f64().unwrap();
    assert!((acc - 0.91).abs() < 1e-9, "{acc}");
    assert_eq!(j.plain.lines().count(), 2);

    let s = runs::show(&a);
    assert_eq!(s.plain, report::show_text(&a));
    let html = s.html.unwrap();
    assert!(html.contains("ddp-status-completed"), "{html}");
    assert!(html.contains("lr = 0.1"));
    assert!(html.contains("try &lt;b&gt;more&lt;/b&gt;"), "{html}");
    let sj = runs::show_json(&a);
    assert_eq!(sj.json.as_ref().unwrap()["name"], "<first>");
    assert!(sj.plain.starts_with("{\n"));

    let c = ddp_workspaces::present::analysis::comparison(&[a.clone(), b.clone()], None).unwrap();
    let o = runs::compare(&c);
    assert_eq!(o.plain, report::comparison_text(&c));
    assert!(o.plain.contains("train.lr"));
    assert!(o.html.unwrap().contains(">train.<wbr>lr</th>"));
    let same =
        ddp_workspaces::present::analysis::comparison(&[b.clone(), b.clone()], None).unwrap();
    let o = runs::compare(&same);
    assert!(
        o.plain
            .ends_with("(no spec key differs between these runs)\n")
    );
    assert!(o.html.unwrap().contains("no spec key differs"));
    assert_eq!(
        runs::compare_json(&c).json.unwrap()["runs"][1]["id"],
        b.record.id
    );
}

/// The opening tags of an HTML string's `<th>` and `<td>` cells.
fn cell_tags(html: &str) -> Vec<&str> {
    html.split('<')
        .filter(|t| t.starts_with("th ") || t.starts_with("td "))
        .map(|t| &t[..t.find('>').unwrap()])
        .collect()
}

#[test]
fn compare_table_wraps_to_fit_the_output_area() {
    let dir = tempfile::tempdir().unwrap();
    let long = "examples/data/a-very-long-folder-name/with/many/parts/mnist-sample";
    let spec = |name: &str, lr: f64, path: &str| {
        format!(
            "name = \"{name}\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n\
             path = \"{path}\"\n[train]\nlr = {lr}\nbatch_size = {}\nseed = {}\n",
            (lr * 1000.0) as u32,
            (lr * 100.0) as u32
        )
    };
    let mut runs = Vec::new();
    for (i, (name, lr, path)) in [("mnist-cnn", 0.1, long), ("mnist-mlp", 0.2, "data")]
        .into_iter()
        .enumerate()
    {
        let mut r = run_in(dir.path(), &format!("20261121-10150{i}-aaaaaa"), lr, &[]);
        r.record.name = Some(format!("lr-{lr}"));
        std::fs::write(r.spec_path(), spec(name, lr, path)).unwrap();
        runs.push(r);
    }
    let c = ddp_workspaces::present::analysis::comparison(&runs, None).unwrap();
    assert_eq!(
        c.differing_keys,
        [
            "data.path",
            "name",
            "train.batch_size",
            "train.lr",
            "train.seed"
        ]
    );
    let o = runs::compare(&c);
    // The text is the CLI's, whose run name column cannot be taken for the spec's `name`.
    assert_eq!(o.plain, report::comparison_text(&c));
    let header = o.plain.lines().next().unwrap();
    assert!(
        header.starts_with("RUN                     RUN NAME  STATUS     data.path"),
        "{header}"
    );
    assert!(header.contains(" spec.name "), "{header}");
    let html = o.html.unwrap();
    assert!(html.contains(">RUN NAME</th>") && html.contains(">spec.<wbr>name</th>"));
    assert!(html.contains(">train.<wbr>batch_<wbr>size</th>"), "{html}");
    assert!(html.contains(&format!(">{}</td>", super::table::breakable(long))));
    // No piece that cannot wrap is longer than 24 characters (about 180 px).
    let pieces = html
        .split(['<', '>', ' '])
        .filter(|p| !p.contains('=') && !p.contains(':'))
        .map(|p| p.chars().count());
    assert!(pieces.max().unwrap() <= 24, "{html}");
    // Never wider than the output area: the table is bounded by it, and every cell wraps
    // (between words, after separators) in a column of at most 14 em.
    assert!(
        html.starts_with("<table class=\"ddp-table\" style=\"") && html.contains("max-width:100%")
    );
    let cells = cell_tags(&html);
    assert_eq!(cells.len(), 3 * 13);
    for tag in cells {
        assert!(
            tag.contains("white-space:normal;overflow-wrap:break-word;max-width:14em"),
            "{tag}"
        );
        assert!(!tag.contains("nowrap"), "{tag}");
    }
    assert_eq!(super::table::MAX_CELL_EM, 14);
}

#[test]
fn breakable_text_wraps_at_separators_and_is_escaped() {
    use super::table::breakable;
    assert_eq!(breakable("train.lr"), "train.<wbr>lr");
    assert_eq!(breakable("a/b_c-d."), "a/<wbr>b_<wbr>c-<wbr>d.");
    assert_eq!(breakable("<x>.&"), "&lt;x&gt;.<wbr>&amp;");
    assert_eq!(breakable("completed"), "completed");
}

#[test]
fn plots_as_svg_and_png() {
    let series = |label: &str| Series {
        label: label.into(),
        records: (1..=3)
            .map(|e| metric(MetricKind::Val, e, e as u64 * 10, e as f64))
            .collect(),
    };
    let o = runs::plot(&[series("a"), series("b")], XAxis::Epoch).unwrap();
    assert_eq!(o.plain, "plot of 2 runs (x = epoch): loss and accuracy");
    let svg = o.svg.as_ref().unwrap();
    assert!(svg.starts_with("<svg") && svg.contains(r#"width="960" height="400""#));
    let png = o.png.as_ref().unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[16..24], [0, 0, 3, 192, 0, 0, 1, 144], "960×400");
    // The HTML (preferred by JupyterLab, and kept by its sanitiser) is the same SVG as an image,
    // at most as wide as drawn, shrinking with the output area.
    let html = o.html.as_ref().unwrap();
    let (img, from_html) = super::card_tests::chart_svg(html);
    assert_eq!(&from_html, svg);
    assert!(
        img.contains("style=\"width:100%;max-width:960px;height:auto\""),
        "{img}"
    );
    assert_eq!(html, &img);
    assert!(super::card_tests::smallest_text(svg) >= 11.0);
    let m = o.to_mime_map();
    for k in ["text/plain", "text/html", "image/svg+xml", "image/png"] {
        assert!(m.contains_key(k), "{k}");
    }
    assert_eq!(
        runs::plot(&[series("a")], XAxis::Step).unwrap().plain,
        "plot of 1 run (x = step): loss and accuracy"
    );
    let empty = Series {
        label: "e".into(),
        records: vec![],
    };
    let err = runs::plot(&[empty], XAxis::Step).unwrap_err();
    assert!(err.to_string().contains("no metric records"), "{err}");
}

#[test]
fn a_language_model_shown_compared_and_plotted() {
    let dir = tempfile::tempdir().unwrap();
    let lm = test_util::lm_run_in(dir.path().join("gpt"));
    let s = runs::show(&lm);
    assert_eq!(s.plain, report::show_text(&lm));
    let html = s.html.unwrap();
    for cell in [
        ">1200/2000</td>",
        ">16640</td>",
        ">0.0005</td>",
        ">loss 1.4500  perplexity 4.26  bits/char 2.092</td>",
    ] {
        assert!(html.contains(cell), "{cell} in {html}");
    }
    assert!(!html.contains("accuracy"), "{html}");
    let c = ddp_workspaces::present::analysis::comparison(std::slice::from_ref(&lm), None).unwrap();
    let o = runs::compare(&c);
    assert_eq!(o.plain, report::comparison_text(&c));
    let html = o.html.unwrap();
    assert!(
        html.contains(">PERPLEXITY</th>") && html.contains(">4.<wbr>26</td>"),
        "{html}"
    );
    let gpt = Series {
        label: "gpt".into(),
        records: test_util::lm_metrics(),
    };
    assert_eq!(
        runs::plot(std::slice::from_ref(&gpt), XAxis::Step)
            .unwrap()
            .plain,
        "plot of 1 run (x = step): loss and perplexity"
    );
    let cnn = Series {
        label: "cnn".into(),
        records: vec![metric(MetricKind::Val, 1, 10, 1.0)],
    };
    assert_eq!(
        runs::plot(&[cnn, gpt], XAxis::Step).unwrap().plain,
        "plot of 2 runs (x = step): loss, accuracy and perplexity"
    );
}

fn telemetry(gpus: Vec<GpuSample>, note: Option<&str>) -> Telemetry {
    let mut process = ProcessSample::sample()
        .cpu_pct(Some(99.0))
        .rss_bytes(Some(300 << 20))
        .command("ddp __replica <x>");
    process.owner.rank = Some(1);
    Telemetry::sample()
        .gpus(gpus)
        .gpu_note(note.map(String::from))
        .cpu(CpuSample {
            per_core_pct: vec![10.0, 95.5],
            total_pct: 52.7,
        })
        .processes(vec![process])
        .notes(vec!["/proc/77/stat: gone".into()])
}

#[test]
fn devices_view() {
    let gpu = GpuSample {
        index: 0,
        uuid: None,
        name: "H100".into(),
        utilization_pct: Some(87.0),
        memory_used_bytes: Some(10 << 30),
        memory_total_bytes: Some(80 << 30),
        temperature_c: Some(61.0),
        power_w: Some(300.0),
        power_limit_w: Some(700.0),
        processes: vec![],
        held_by: Some("r1".into()),
    };
    let o = devices::devices(&telemetry(vec![gpu], None));
    let p = &o.plain;
    assert!(p.starts_with("GPUs\nGPU  NAME  UTIL  MEMORY"), "{p}");
    assert!(p.contains("87%") && p.contains("10.0 GiB / 80.0 GiB") && p.contains("61°C"));
    assert!(p.contains("r1"));
    assert!(p.contains("CPU: 2 cores, 53% in use"), "{p}");
    assert!(p.contains("memory: 4.0 GiB of 16.0 GiB used (25%)"), "{p}");
    assert!(p.contains("rank 1") && p.contains("300.0 MiB") && p.contains("ddp __replica <x>"));
    assert!(p.contains("note: /proc/77/stat: gone"));
    let h = o.html.unwrap();
    assert!(
        h.contains("ddp __replica &lt;x&gt;") && h.contains("width:95.5%"),
        "{h}"
    );

    let o = devices::devices(&telemetry(vec![], Some("no NVIDIA driver")));
    assert!(
        o.plain.starts_with("GPUs: none\n(no NVIDIA driver)\n"),
        "{}",
        o.plain
    );
    let o = devices::devices(&telemetry(vec![], None));
    assert!(o.plain.starts_with("GPUs: none\n(no GPUs)\n"));
    assert_eq!(devices::bytes(512), "512 B");
    assert_eq!(devices::bytes(1536), "1.5 KiB");
}
