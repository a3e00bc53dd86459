//! One run seen by the three front ends, with real clients: a notebook (jupyter_client and the
//! `ddp` kernel) starts it, `ddp ls --json` lists it, `ddp-tui` in tmux shows it live and stops it,
//! the notebook's card ends `stopped`, `ddp resume` finishes it while the kernel is killed; and a
//! `%%ddp train` cell trains a model that is not built in to >= 95 % test accuracy.
//!
//! The scenario is `tests/python/test_front_ends.py`, run in a sandbox (isolated Jupyter folders,
//! the kernelspec installed, a fresh workspace; every process left behind stopped). Needs the
//! test venv (`scripts/python-venv.sh`) and tmux, which the README's test command installs.

use std::ffi::OsStr;

use ddp_e2e::{binaries, repo, run_script};

#[test]
fn one_run_three_front_ends_and_a_notebook_model() {
    let bin = binaries();
    let env: [(&str, &OsStr); 2] = [
        ("DDP_BIN", bin.ddp.as_os_str()),
        ("DDP_TUI_BIN", bin.tui.as_os_str()),
    ];
    // A cold build cache compiles candle in release mode for the `%%ddp train` cell first.
    run_script(
        &bin.kernel,
        &repo().join("tests/python/test_front_ends.py"),
        &[],
        &env,
        2400,
    );
}
