//! The trained `model.safetensors` loads into the same network written in PyTorch
//! (`load_in_pytorch.py`, `load_state_dict(strict=True)`), and PyTorch's test loss and accuracy are
//! the trainer's own.
//!
//! Needs a Python with torch, safetensors and numpy, named by `DDP_TORCH_PYTHON`. CI has no torch,
//! so the test is ignored unless asked for, and fails when asked for without that Python:
//! `DDP_TORCH_PYTHON=/path/to/venv/bin/python cargo test -p ddp-custom-model --test pytorch --
//! --ignored`.

use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs DDP_TORCH_PYTHON (torch, safetensors)"]
fn pytorch_loads_the_weights_and_reproduces_the_test_metrics() {
    let Some(python) = std::env::var_os("DDP_TORCH_PYTHON") else {
        panic!(
            "DDP_TORCH_PYTHON is not set: name a Python with torch, safetensors and numpy, e.g. \
             DDP_TORCH_PYTHON=/path/to/venv/bin/python cargo test -p ddp-custom-model --test \
             pytorch -- --ignored"
        );
    };
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = here.join("../data/mnist-sample");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let status = Command::new(env!("CARGO_BIN_EXE_custom-model"))
        .arg(here.join("custom.toml"))
        .args(["--standalone", "--nproc", "1", "--out"])
        .arg(&out)
        .args(["--set", "train.epochs=1", "--set", "data.limit_train=2048"])
        .args(["--set", &format!("data.path={}", data.display())])
        .status()
        .unwrap();
    assert!(status.success(), "custom-model: {status}");

    let metrics = std::fs::read_to_string(out.join("metrics/rank-0.jsonl")).unwrap();
    let test: serde_json::Value = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|r| r["kind"] == "test")
        .expect("a test record in metrics/rank-0.jsonl");
    let expected = format!(
        "test loss {:.4} accuracy {:.2}%",
        test["loss"].as_f64().unwrap(),
        100.0 * test["accuracy"].as_f64().unwrap()
    );

    let output = Command::new(&python)
        .arg(here.join("load_in_pytorch.py"))
        .arg(out.join("model.safetensors"))
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "load_in_pytorch.py: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with(&expected),
        "PyTorch printed {stdout:?}, the trainer recorded {expected:?}"
    );
}
