//! A crate of one's own outside the checkout, made as a user makes it: `ddp new model DIR` in a
//! temporary folder, `cargo test --release --offline` there (the crate's own test trains its model
//! with 2 replicas), then `ddp run model.toml --trainer` of the executable it built. The crate
//! names ddp-trainer and its candle by path and has no `[patch]`: what docs/custom-models.md
//! tells a user to write.
//!
//! Compiled dependencies come from the test run's cell build cache (cargo's build directory,
//! shared with the kernel's `%%ddp train` cells: candle is compiled once per test run).

use std::process::Command;
use std::time::Duration;

use ddp_e2e::{binaries, cell_build_cache, run_limited_with};

/// `cmd` within `limit`, asserting success; its stdout and stderr.
fn ok(cmd: Command, limit: Duration, what: &str) -> (String, String) {
    let o = run_limited_with(cmd, limit, Vec::new);
    match o.status {
        Some(s) if s.success() => (o.stdout, o.stderr),
        Some(s) => panic!("{what}: {s}\n{}\n{}", o.stdout, o.stderr),
        None => panic!(
            "{what}: still running after {limit:?}\n{}\n{}",
            o.stdout, o.stderr
        ),
    }
}

#[test]
fn a_new_model_crate_outside_the_checkout_builds_tests_and_trains() {
    let bins = binaries();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-net");
    assert!(
        !dir.starts_with(ddp_e2e::repo()),
        "the crate must be outside the checkout"
    );

    let mut new = Command::new(&bins.ddp);
    new.args(["new", "model"]).arg(&dir);
    let (said, _) = ok(new, Duration::from_secs(30), "ddp new model");
    assert!(said.contains("wrote the crate my-net"), "{said}");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(!manifest.contains("[patch"), "{manifest}");
    // Written once: a second time into the same folder is refused, nothing changed.
    let mut again = Command::new(&bins.ddp);
    again.args(["new", "model"]).arg(&dir);
    let o = run_limited_with(again, Duration::from_secs(30), Vec::new);
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("not an empty folder"), "{}", o.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.join("Cargo.toml")).unwrap(),
        manifest
    );

    // The user's commands, in the crate's folder; only the build directory is the test run's.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let cache = cell_build_cache(&bins.kernel);
    let in_crate = |args: &[&str]| {
        let mut c = Command::new(&cargo);
        c.args(args)
            .current_dir(&dir)
            .env("CARGO_BUILD_BUILD_DIR", &cache)
            .env_remove("CARGO_TARGET_DIR")
            .env("CARGO_TERM_COLOR", "never");
        c
    };
    // Cold, this compiles candle and ddp-trainer in release mode (2 cores: 10 to 20 minutes).
    let (out, err) = ok(
        in_crate(&["test", "--release", "--offline"]),
        Duration::from_secs(2400),
        "cargo test --release --offline in the new crate",
    );
    assert!(
        out.contains("test two_replicas_learn_the_digits ... ok"),
        "{out}\n{err}"
    );
    let trainer = dir.join("target/release/my-net");
    assert!(trainer.is_file(), "no {}", trainer.display());

    // Its executable is a ddp-trainer that `ddp run --trainer` supervises.
    let ws = tmp.path().join("ws");
    let mut run = Command::new(&bins.ddp);
    run.arg("--workspace")
        .arg(&ws)
        .arg("run")
        .arg(dir.join("model.toml"))
        .arg("--trainer")
        .arg(&trainer)
        .args(["--set", "train.epochs=1"])
        .env("RAYON_NUM_THREADS", "1")
        .env_remove("DDP_WORKSPACE");
    let (out, err) = ok(run, Duration::from_secs(300), "ddp run --trainer");
    assert!(out.contains("status             completed"), "{out}\n{err}");
    let accuracy = out
        .lines()
        .find_map(|l| l.strip_prefix("test accuracy"))
        .map(|v| v.trim().trim_end_matches('%').parse::<f64>().unwrap());
    assert!(
        accuracy.is_some_and(|a| a >= 90.0),
        "test accuracy {accuracy:?}:\n{out}"
    );
    let runs = std::fs::read_dir(ws.join("experiments/my-net/runs")).unwrap();
    assert_eq!(runs.count(), 1);
}
