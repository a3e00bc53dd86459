//! One run seen by the three front ends, with real clients: a notebook (jupyter_client and the
//! `ddp` kernel) starts it, `ddp ls --json` lists it, `ddp-tui` in tmux shows it live and stops it,
//! the notebook's card ends `stopped`, `ddp resume` finishes it while the kernel is killed; and a
//! `%%ddp train` cell trains a model that is not built in to >= 95 % test accuracy. Then a run on
//! the test Slurm, submitted from the notebook, live in its card and the dashboard with its job,
//! Slurm state and nodes, stopped from the dashboard.
//!
//! The scenarios are `tests/python/test_front_ends.py` (`FrontEnds`, `SlurmRun`), run in a
//! sandbox (isolated Jupyter folders, the kernelspec installed, a fresh workspace; every process
//! left behind stopped). Needs the test venv (`scripts/python-venv.sh`) and tmux, which the
//! README's test command installs; the Slurm one also the test cluster (`DDP_TEST_SLURM`; it skips,
//! saying so, without one, unless `DDP_TEST_SLURM_REQUIRED=1`).

use std::ffi::OsStr;

use ddp_e2e::{SlurmCluster, binaries, repo, run_script};

#[test]
fn one_run_three_front_ends_and_a_notebook_model() {
    // A cold build cache compiles candle in release mode for the `%%ddp train` cell first.
    scenario("FrontEnds", &[], 2400);
}

#[test]
fn a_slurm_run_live_in_the_notebook_and_the_dashboard() {
    let Some(cluster) = SlurmCluster::or_skip() else {
        return;
    };
    let env: [(&str, &OsStr); 2] = [
        ("SLURM_CONF", cluster.conf().as_os_str()),
        ("DDP_SLURM_POLL_MAX_S", OsStr::new("1")),
    ];
    scenario("SlurmRun", &env, 600);
}

/// The scenarios of `class` in test_front_ends.py, with the front ends' binaries and `env`.
fn scenario(class: &str, env: &[(&str, &OsStr)], limit_s: u64) {
    let bin = binaries();
    let mut all: Vec<(&str, &OsStr)> = vec![
        ("DDP_BIN", bin.ddp.as_os_str()),
        ("DDP_TUI_BIN", bin.tui.as_os_str()),
    ];
    all.extend_from_slice(env);
    run_script(
        &bin.kernel,
        &repo().join("tests/python/test_front_ends.py"),
        &[OsStr::new(class)],
        &all,
        limit_s,
    );
}
