//! Tests of the plots: SVG texts, PNG bytes, file and in-memory variants.
use super::style::COLOURS;
use super::*;
use crate::metrics::MetricKind;
use crate::test_util::metric;

fn record(kind: MetricKind, epoch: usize, step: u64, loss: f64, acc: Option<f64>) -> MetricRecord {
    metric(kind, epoch, step, loss, acc).time(1_700_000_000.0 + step as f64)
}

/// `epochs` epochs of 100 steps: a train record every 10 steps, val at each epoch's end,
/// test at the end; accuracy only when `classify`. `scale` varies the curves per run.
fn run(label: &str, epochs: usize, classify: bool, scale: f64) -> Series {
    let mut records = Vec::new();
    for e in 1..=epochs {
        for s in (10..=100).step_by(10) {
            let step = (e as u64 - 1) * 100 + s;
            let loss = scale * 2.0 / (1.0 + step as f64 / 50.0);
            records.push(record(MetricKind::Train, e, step, loss, None));
        }
        let acc = classify.then(|| 0.9 + 0.02 * e as f64 / scale);
        let loss = scale * 2.2 / (1.0 + e as f64);
        records.push(record(MetricKind::Val, e, e as u64 * 100, loss, acc));
    }
    let last = epochs as u64 * 100;
    let acc = classify.then_some(0.95);
    records.push(record(MetricKind::Test, epochs, last, scale * 0.5, acc));
    Series {
        label: label.to_string(),
        records,
    }
}

fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG magic");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

/// The contents of the `<text>` elements of an SVG (plotters puts them on lines of their own).
fn svg_texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').unwrap() + 1..];
            body[..body.find("</text>").unwrap()].trim()
        })
        .collect()
}

/// Checks that `path` is a complete SVG whose texts include every one of `texts`.
fn assert_svg(path: &Path, texts: &[&str]) -> String {
    let svg = std::fs::read_to_string(path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    let found = svg_texts(&svg);
    for t in texts {
        assert!(found.contains(t), "no text {t:?} in {found:?}");
    }
    svg
}

fn only_file(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn svg_one_and_three_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("one.svg");
    plot_runs(&[run("alpha", 3, true, 1.0)], XAxis::Step, &out).unwrap();
    let text = assert_svg(&out, &["alpha", "train", "val", "test", "loss", "accuracy"]);
    assert!(
        text.contains(r#"width="1400" height="560""#),
        "{}",
        &text[..120]
    );
    assert!(svg_texts(&text).contains(&"global step"));
    assert!(!text.contains("no accuracy"));

    let out = dir.path().join("three.SVG");
    let runs = [
        run("alpha", 3, true, 1.0),
        run("beta", 2, true, 1.3),
        run("gamma", 4, true, 0.8),
    ];
    plot_runs(&runs, XAxis::Epoch, &out).unwrap();
    let text = assert_svg(&out, &["alpha", "beta", "gamma", "epoch"]);
    // Each run in its own colour.
    for c in &COLOURS[..3] {
        let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
        assert!(text.contains(&hex), "colour {hex} missing");
    }
    // Only the outputs: the temporary files are gone.
    assert_eq!(only_file(dir.path()), ["one.svg", "three.SVG"]);
}

#[test]
fn png_one_and_three_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("one.png");
    plot_runs(&[run("alpha", 2, true, 1.0)], XAxis::Step, &out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(png_size(&bytes), BOTH_SIZE);

    let out = dir.path().join("three.png");
    let runs = [
        run("alpha", 3, true, 1.0),
        run("beta", 3, false, 1.3),
        run("gamma", 1, true, 0.8),
    ];
    plot_runs(&runs, XAxis::Epoch, &out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(png_size(&bytes), BOTH_SIZE);
    assert_eq!(only_file(dir.path()), ["one.png", "three.png"]);
}

#[test]
fn in_memory_images_match_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let runs = [run("alpha", 2, true, 1.0), run("beta", 2, true, 1.2)];
    let svg = plot_runs_svg(&runs, XAxis::Step).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.contains(r#"width="1400" height="560""#));
    let out = dir.path().join("p.svg");
    plot_runs(&runs, XAxis::Step, &out).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), svg);

    let png = plot_runs_png(&runs, XAxis::Epoch).unwrap();
    assert_eq!(png_size(&png), BOTH_SIZE);
    let out = dir.path().join("p.png");
    plot_runs(&runs, XAxis::Epoch, &out).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), png);
    assert_eq!(only_file(dir.path()), ["p.png", "p.svg"]);
}

#[test]
fn small_sizes_scale_text_down() {
    let runs = [run("alpha", 2, true, 1.0)];
    let svg = plot_runs_svg_sized(&runs, XAxis::Step, (640, 260)).unwrap();
    assert!(svg.starts_with("<svg"));
    assert!(svg.contains(r#"width="640" height="260""#));
    let texts = svg_texts(&svg);
    for t in ["alpha", "loss", "accuracy", "train", "val", "test"] {
        assert!(texts.contains(&t), "no text {t:?} in {texts:?}");
    }
    let png = plot_runs_png_sized(&runs, XAxis::Step, (640, 260)).unwrap();
    assert_eq!(png_size(&png), (640, 260));

    assert_eq!(Scale::of((640, 260), BOTH_SIZE), Scale(0.6));
    assert_eq!(Scale::of(BOTH_SIZE, BOTH_SIZE), Scale(1.0));
    assert_eq!(Scale::of((2800, 1120), BOTH_SIZE), Scale(1.0));
    assert_eq!(Scale::of((1050, 420), BOTH_SIZE).px(26), 20);

    let err = plot_runs_svg_sized(&runs, XAxis::Step, (100, 260)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plot size 100x260 is too small: at least 240x120 pixels"
    );
    let empty = Series {
        label: "fresh".into(),
        records: vec![],
    };
    let err = plot_runs_png(&[empty], XAxis::Step).unwrap_err();
    assert_eq!(
        err.to_string(),
        "nothing to plot: run `fresh` has no metric records"
    );
}

#[test]
fn bad_extension_is_refused_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["plot.jpg", "plot", "svg"] {
        let out = dir.path().join(name);
        let err = plot_runs(&[run("a", 1, true, 1.0)], XAxis::Step, &out).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: unsupported plot file type: the name must end in .svg or .png",
                out.display()
            )
        );
    }
    assert!(only_file(dir.path()).is_empty());
}

#[test]
fn unwritable_destination_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["missing/p.svg", "missing/p.png"] {
        let out = dir.path().join(name);
        let err = plot_runs(&[run("a", 1, true, 1.0)], XAxis::Step, &out).unwrap_err();
        assert!(
            matches!(err, Error::Write { ref path, .. } if *path == out),
            "{err:?}"
        );
        assert!(err.to_string().starts_with(&format!("{}: ", out.display())));
    }
    assert!(only_file(dir.path()).is_empty());
}

#[test]
fn regression_run_says_no_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("reg.svg");
    plot_runs(&[run("reg", 2, false, 1.0)], XAxis::Step, &out).unwrap();
    let text = assert_svg(&out, &["reg"]);
    assert!(text.contains("no accuracy (regression)"));
    let out = dir.path().join("reg.png");
    plot_runs(&[run("reg", 2, false, 1.0)], XAxis::Epoch, &out).unwrap();
    assert_eq!(png_size(&std::fs::read(&out).unwrap()), BOTH_SIZE);
}

#[test]
fn empty_records_error_names_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.svg");
    let empty = Series {
        label: "fresh".into(),
        records: vec![],
    };
    let err = plot_runs(std::slice::from_ref(&empty), XAxis::Step, &out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "nothing to plot: run `fresh` has no metric records"
    );
    let nan = Series {
        label: "diverged".into(),
        records: vec![record(MetricKind::Train, 1, 5, f64::NAN, None)],
    };
    let err = plot_runs(&[empty.clone(), nan], XAxis::Step, &out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "nothing to plot: run `fresh` has no metric records; \
         run `diverged` has no finite loss or accuracy in its 1 records"
    );
    let err = plot_runs(&[], XAxis::Step, &out).unwrap_err();
    assert_eq!(err.to_string(), "nothing to plot: no runs given");
    assert!(only_file(dir.path()).is_empty());

    // Beside a run with data, an empty run is only marked in the legend.
    plot_runs(&[run("ok", 1, true, 1.0), empty], XAxis::Step, &out).unwrap();
    assert_svg(&out, &["ok", "fresh (no data)"]);
}

#[test]
fn single_point_no_val_and_nan_losses() {
    let dir = tempfile::tempdir().unwrap();
    let one = Series {
        label: "one".into(),
        records: vec![record(MetricKind::Train, 1, 7, 0.5, None)],
    };
    let with_nan = Series {
        label: "nan".into(),
        records: vec![
            record(MetricKind::Train, 1, 1, 1.0, None),
            record(MetricKind::Train, 1, 2, f64::NAN, None),
            record(MetricKind::Train, 1, 3, f64::INFINITY, None),
            record(MetricKind::Train, 1, 4, 0.5, None),
        ],
    };
    let data = run_data(&with_nan, XAxis::Step);
    assert_eq!(data.train_loss, [(1.0, 1.0), (4.0, 0.5)]);
    assert!(data.val_loss.is_empty() && !data.has_accuracy());
    for ext in ["svg", "png"] {
        let out = dir.path().join(format!("p.{ext}"));
        plot_runs(&[one.clone(), with_nan.clone()], XAxis::Step, &out).unwrap();
        plot_runs(std::slice::from_ref(&one), XAxis::Epoch, &out).unwrap();
    }
    let text = assert_svg(&dir.path().join("p.svg"), &["one"]);
    // The lone train point is drawn as a dot.
    assert!(text.contains("<circle"), "no dot for a single point");
}

#[test]
fn train_loss_from_one_rank_and_latest_history() {
    let mut records = vec![
        record(MetricKind::Train, 1, 10, 1.0, None),
        record(MetricKind::Train, 1, 20, 0.9, None),
        record(MetricKind::Train, 1, 30, 0.8, None),
        // Resumed from the checkpoint at step 20: 30 is redone.
        record(MetricKind::Train, 1, 30, 0.7, None),
        record(MetricKind::Train, 1, 40, 0.6, None),
    ];
    let mut other_rank = record(MetricKind::Train, 1, 15, 5.0, None);
    other_rank.rank = 1;
    records.push(other_rank);
    let s = Series {
        label: "r".into(),
        records,
    };
    let data = run_data(&s, XAxis::Step);
    assert_eq!(
        data.train_loss,
        [(10.0, 1.0), (20.0, 0.9), (30.0, 0.7), (40.0, 0.6)]
    );
}

#[test]
fn epoch_axis_places_records_within_epochs() {
    let s = run("e", 2, true, 1.0);
    let data = run_data(&s, XAxis::Epoch);
    let xs: Vec<f64> = data.train_loss.iter().map(|p| p.0).collect();
    let expected: Vec<f64> = (1..=20).map(|i| i as f64 / 10.0).collect();
    for (x, e) in xs.iter().zip(&expected) {
        assert!((x - e).abs() < 1e-9, "{xs:?}");
    }
    assert_eq!(
        data.val_acc.iter().map(|p| p.0).collect::<Vec<_>>(),
        [1.0, 2.0]
    );
    assert_eq!(data.test_acc.map(|p| p.0), Some(2.0));

    // An unfinished epoch (no val yet) is scaled by the finished epochs' length.
    let mut s = run("e", 1, true, 1.0);
    s.records.retain(|r| r.kind != MetricKind::Test);
    s.records.push(record(MetricKind::Train, 2, 150, 0.3, None));
    let data = run_data(&s, XAxis::Epoch);
    let last = data.train_loss.last().unwrap().0;
    assert!((last - 1.5).abs() < 1e-9, "{last}");
}

#[test]
fn run_folder_writes_two_svgs() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("mnist-3");
    let mut w = ddp_trainer::metrics::MetricsWriter::create(&run_dir, 0).unwrap();
    for r in &run("x", 2, true, 1.0).records {
        w.write(r).unwrap();
    }
    let plots = run_dir.join("plots");
    plot_run_folder(&run_dir, &plots).unwrap();
    assert_eq!(only_file(&plots), [ACCURACY_SVG, LOSS_SVG]);
    let loss = assert_svg(&plots.join(LOSS_SVG), &["mnist-3", "train", "val", "test"]);
    assert!(loss.contains(r#"width="800" height="520""#));
    let acc = assert_svg(&plots.join(ACCURACY_SVG), &["mnist-3", "val", "test"]);
    assert!(!acc.contains(">train<"));

    let missing = dir.path().join("nothing");
    let err = plot_run_folder(&missing, &plots).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: no metrics file (has the run started?)",
            missing.join("metrics/rank-0.jsonl").display()
        )
    );
}

#[test]
fn x_axis_parses() {
    assert_eq!("step".parse::<XAxis>().unwrap(), XAxis::Step);
    assert_eq!("epoch".parse::<XAxis>().unwrap(), XAxis::Epoch);
    assert_eq!(XAxis::Epoch.to_string(), "epoch");
    assert_eq!(
        "steps".parse::<XAxis>().unwrap_err().to_string(),
        "unknown x axis `steps`: expected `step`, `epoch` or `time`"
    );
}

/// The `font-size` and `y` of each `<text>` of an SVG, with its content.
fn svg_text_boxes(svg: &str) -> Vec<(f64, f64, &str)> {
    let attr = |t: &str, name: &str| -> f64 {
        let at = t.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        t[at..at + t[at..].find('"').unwrap()].parse().unwrap()
    };
    svg.split("<text")
        .skip(1)
        .zip(svg_texts(svg))
        .map(|(t, body)| (attr(t, "font-size"), attr(t, "y"), body))
        .collect()
}

#[test]
fn text_is_readable_and_the_legend_is_under_the_panels() {
    let runs = [run("alpha", 3, true, 1.0), run("beta", 2, true, 1.3)];
    for size in [(640, 260), (960, 400), BOTH_SIZE] {
        let svg = plot_runs_svg_sized(&runs, XAxis::Step, size).unwrap();
        let boxes = svg_text_boxes(&svg);
        for (font, _, text) in &boxes {
            assert!(*font >= 11.0, "{text:?} is {font} px at {size:?}");
        }
        // The legend's entries lie below the lowest text of the panels (the x axis
        // description), so no entry covers a point.
        let axis = boxes
            .iter()
            .filter(|b| b.2 == "global step")
            .map(|b| b.1)
            .fold(0.0, f64::max);
        assert!(axis > 0.0);
        for entry in ["alpha", "beta", "train", "val", "test"] {
            let found: Vec<f64> = boxes.iter().filter(|b| b.2 == entry).map(|b| b.1).collect();
            assert_eq!(found.len(), 1, "{entry} at {size:?}: {found:?}");
            assert!(found[0] > axis, "{entry} at y {} above {axis}", found[0]);
            assert!(found[0] < size.1 as f64);
        }
    }
    // A single-panel image (a run folder's) keeps its text readable too.
    let data = [run_data(&runs[0], XAxis::Step)];
    let figure = Figure::new(Panels::Accuracy, &data, XAxis::Step, (400, 260));
    let svg = String::from_utf8(encode(&figure, Format::Svg).unwrap()).unwrap();
    let boxes = svg_text_boxes(&svg);
    assert!(boxes.iter().all(|b| b.0 >= 11.0), "{boxes:?}");
    assert!(!boxes.iter().any(|b| b.2 == "train"), "{boxes:?}");
}

#[test]
fn accuracy_panel_says_why_it_is_empty() {
    let texts = |runs: &[Series]| plot_runs_svg_sized(runs, XAxis::Step, (640, 260)).unwrap();
    // A classification run before its first validation: only train records so far.
    let mut early = run("early", 1, true, 1.0);
    early.records.retain(|r| r.kind == MetricKind::Train);
    let svg = texts(std::slice::from_ref(&early));
    assert!(svg_texts(&svg).contains(&"accuracy after the first validation"));
    assert!(!svg.contains("regression"));
    // Validated without accuracy figures: regression.
    let svg = texts(&[run("reg", 1, false, 1.0)]);
    assert!(svg_texts(&svg).contains(&"no accuracy (regression)"));
    // A regression run beside one not yet validated: the accuracy may still come.
    let svg = texts(&[run("reg", 1, false, 1.0), early.clone()]);
    assert!(svg_texts(&svg).contains(&"accuracy after the first validation"));

    // A run folder whose run ended before any validation.
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("short");
    let mut w = ddp_trainer::metrics::MetricsWriter::create(&run_dir, 0).unwrap();
    for r in &early.records {
        w.write(r).unwrap();
    }
    plot_run_folder(&run_dir, &run_dir.join("plots")).unwrap();
    let acc = assert_svg(&run_dir.join("plots").join(ACCURACY_SVG), &["accuracy"]);
    assert!(svg_texts(&acc).contains(&"no accuracy: no validation ran"));
}

fn lm(label: &str) -> Series {
    Series {
        label: label.into(),
        records: crate::test_util::lm_metrics(),
    }
}

#[test]
fn a_language_model_gets_a_perplexity_panel_instead_of_accuracy() {
    let svg = plot_runs_svg(&[lm("gpt")], XAxis::Step).unwrap();
    let texts = svg_texts(&svg);
    for t in ["gpt", "loss", "perplexity", "train", "val", "global step"] {
        assert!(texts.contains(&t), "no {t:?} in {texts:?}");
    }
    // Caption and axis description of each of the two panels.
    assert_eq!(texts.iter().filter(|t| **t == "global step").count(), 2);
    assert_eq!(texts.iter().filter(|t| **t == "perplexity").count(), 2);
    // No accuracy, and no test in the legend: a language model has neither.
    assert!(
        !svg.contains("accuracy") && !texts.contains(&"test"),
        "{texts:?}"
    );
    let gpt = lm("gpt");
    let data = run_data(&gpt, XAxis::Step);
    assert_eq!(data.val_ppl.len(), 3);
    assert_eq!(
        panel_captions(std::slice::from_ref(&gpt)),
        ["loss", "perplexity"]
    );
    assert!(data.language_model && !data.has_accuracy());

    // Before its first validation the panel says when it comes.
    let mut early = lm("early");
    early.records.retain(|r| r.kind == MetricKind::Train);
    let svg = plot_runs_svg_sized(&[early], XAxis::Step, (640, 260)).unwrap();
    assert!(svg_texts(&svg).contains(&"perplexity after the first validation"));
}

#[test]
fn runs_of_both_kinds_get_both_panels() {
    let runs = [run("cnn", 2, true, 1.0), lm("gpt")];
    assert_eq!(panel_captions(&runs), ["loss", "accuracy", "perplexity"]);
    assert_eq!(panel_captions(&runs[..1]), ["loss", "accuracy"]);
    let svg = plot_runs_svg(&runs, XAxis::Step).unwrap();
    let texts = svg_texts(&svg);
    for t in [
        "loss",
        "accuracy",
        "perplexity",
        "cnn",
        "gpt",
        "train",
        "val",
        "test",
    ] {
        assert!(texts.contains(&t), "no {t:?} in {texts:?}");
    }
    assert_eq!(texts.iter().filter(|t| **t == "global step").count(), 3);
    let png = plot_runs_png(&runs, XAxis::Step).unwrap();
    assert_eq!(png_size(&png), BOTH_SIZE);
}

#[test]
fn a_language_models_run_folder_gets_loss_and_perplexity_svgs() {
    let dir = tempfile::tempdir().unwrap();
    let run = crate::test_util::lm_run_in(dir.path().join("gpt"));
    let plots = run.dir.join("plots");
    plot_run_folder(&run.dir, &plots).unwrap();
    assert_eq!(only_file(&plots), [LOSS_SVG, PERPLEXITY_SVG]);
    let ppl = assert_svg(&plots.join(PERPLEXITY_SVG), &["gpt", "val", "perplexity"]);
    assert!(!svg_texts(&ppl).contains(&"train") && !svg_texts(&ppl).contains(&"test"));
    let loss = assert_svg(&plots.join(LOSS_SVG), &["gpt", "train", "val", "loss"]);
    assert!(!svg_texts(&loss).contains(&"test"));
}
