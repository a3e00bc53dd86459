//! A language model through the `ddp` binary: a tiny GPT on the bundled Shakespeare, run in the
//! foreground, then `show`, `compare` and `plot` showing its loss, perplexity, bits per character
//! and tokens/s, with its progress in steps and no accuracy.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ddp_workspaces::Workspace;

/// The tiny GPT on 2 replicas.
fn spec(dir: &Path) -> PathBuf {
    TestSpec::tiny_gpt()
        .set("ddp.replicas", 2)
        .write_as(&dir.join("gpt.toml"))
}

/// The value of the row `key` of a `key  value` listing.
fn row<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .filter(|rest| rest.starts_with("  "))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no row {key:?} in\n{text}"))
}

#[test]
fn show_compare_and_plot_a_language_model() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let spec = spec(dir.path());
    let out = ok(run_ddp(
        &ws,
        &["run", spec.to_str().unwrap()],
        Duration::from_secs(240),
    ));
    let (runs, _) = Workspace::open(&ws).unwrap().runs().unwrap();
    let run = &runs[0];
    let last_val = run
        .metrics()
        .unwrap()
        .into_iter()
        .rev()
        .find(|m| m.kind == ddp_workspaces::metrics::MetricKind::Val)
        .expect("a validation record");
    let (loss, ppl) = (last_val.loss, last_val.loss.exp());
    let bits = last_val.loss / std::f64::consts::LN_2;
    // The results table of the foreground run.
    assert_eq!(row(&out, "status"), "completed");
    assert_eq!(row(&out, "steps"), "6");
    assert_eq!(row(&out, "val loss"), format!("{loss:.4}"));
    assert_eq!(row(&out, "val perplexity"), format!("{ppl:.2}"));
    assert_eq!(row(&out, "val bits/char"), format!("{bits:.3}"));
    assert!(row(&out, "tokens/s").parse::<u64>().unwrap() > 0);
    assert!(
        !out.contains("accuracy") && !out.contains("epochs"),
        "{out}"
    );

    // `ddp show`: steps of the plan, the learning rate, the last validation.
    let show = ok(run_ddp(&ws, &["show", "latest"], Duration::from_secs(30)));
    assert_eq!(row(&show, "steps"), "6/6");
    assert_eq!(row(&show, "lr"), "0.003");
    assert_eq!(
        row(&show, "val"),
        format!("loss {loss:.4}  perplexity {ppl:.2}  bits/char {bits:.3}")
    );
    let fields = &show[..show.find("\nspec (").unwrap()];
    assert!(
        !fields.contains("accuracy") && !fields.contains("epochs"),
        "{show}"
    );
    let json = ok(run_ddp(
        &ws,
        &["show", "latest", "--json"],
        Duration::from_secs(30),
    ));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["summary"]["language_model"], true);
    assert_eq!(v["summary"]["final_val_perplexity"], ppl);
    assert_eq!(v["summary"]["final_val_bits_per_char"], bits);
    assert!(v["summary"]["tokens_per_sec"].as_f64().unwrap() > 0.0);

    // `ddp compare`: a language model's columns, and where its steps went.
    let compare = ok(run_ddp(
        &ws,
        &["compare", "latest"],
        Duration::from_secs(30),
    ));
    let header = compare.lines().next().unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        [
            "RUN",
            "STATUS",
            "VAL",
            "LOSS",
            "PERPLEXITY",
            "TOKENS/S",
            "STEP",
            "COMM",
            "EXPOSED",
            "BOUND",
            "DURATION"
        ]
    );

    // The supervisor's plots and `ddp plot`: perplexity, not accuracy.
    assert!(run.dir.join("plots/loss.svg").is_file());
    assert!(run.dir.join("plots/perplexity.svg").is_file());
    assert!(!run.dir.join("plots/accuracy.svg").exists());
    let svg = dir.path().join("gpt.svg");
    ok(run_ddp(
        &ws,
        &["plot", "latest", "-o", svg.to_str().unwrap()],
        Duration::from_secs(30),
    ));
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains("perplexity") && !svg.contains("accuracy"));
}
