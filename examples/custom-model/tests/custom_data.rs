//! The custom data set, loss and metrics of `custom-data` end to end: every evaluation record
//! carries the metrics (top-1 is the engine's accuracy, computed the other way), the loss is the
//! label-smoothed one (not the engine's cross-entropy), and data.json records the data set.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn records(out: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(out.join("metrics/rank-0.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn evaluations_carry_the_metrics_and_data_json_the_data_set() {
    let dir = tempfile::tempdir().unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("custom-data.toml");
    let out = dir.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_custom-data"))
        .arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&out)
        .args([
            "--set",
            "train.epochs=2",
            "--set",
            "checkpoint.every_epochs=0",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let evals: Vec<Value> = records(&out)
        .into_iter()
        .filter(|r| r["kind"] != "train")
        .collect();
    assert_eq!(evals.len(), 3, "two validations and a test");
    for r in &evals {
        let m = &r["metrics"];
        assert_eq!(m["top1"], r["accuracy"], "{r}");
        let c = m["confidence"].as_f64().unwrap();
        assert!(c > 1.0 / 3.0 && c <= 1.0, "{r}");
    }
    let test = evals.last().unwrap();
    assert_eq!(
        (test["kind"].as_str(), test["samples"].as_u64()),
        (Some("test"), Some(600))
    );
    // Label smoothing keeps the loss above the smoothing's floor even when every point is right.
    assert!(
        test["loss"].as_f64().unwrap() > 0.1 * (3f64).ln() * 2.0 / 3.0,
        "{test}"
    );
    assert!(stdout.contains(" confidence "), "{stdout}");
    let data: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
    assert_eq!(data["format"], "custom");
    assert_eq!(
        (
            data["train_samples"].as_u64(),
            data["test_samples"].as_u64()
        ),
        (Some(3000), Some(600))
    );
}
