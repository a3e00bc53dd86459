#!/usr/bin/env bash
# The test command (README, CI's .ci/run): checks formatting (cargo fmt), installs what the tests need that cargo does not (tmux, for the
# dashboard's end-to-end test in a real terminal; Chromium and chromedriver, for the notebook in a
# real browser; a Python venv with pinned Jupyter clients, JupyterLab and Selenium, for the
# kernel's tests with real Jupyter clients), brings up two two-node Slurm test clusters
# (scripts/slurm-cluster.sh; stopped at the end), then builds every test with clippy's lints as
# errors and runs them (cargo-nextest, .config/nextest.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-off full run gains nothing from incremental caches, which would add gigabytes to target/.
# Clippy and the tests share target/, so this applies to both.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Fail fast, before the long part, naming the check and the command that fixes or shows it.
for tool in fmt clippy; do
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "scripts/test.sh: cargo $tool is not installed: rustup component add $( [ $tool = fmt ] && echo rustfmt || echo clippy )" >&2
    exit 1
  fi
done
if ! cargo fmt --all --check; then
  echo "scripts/test.sh: formatting check failed (cargo fmt --all --check): run \`cargo fmt --all\` to fix it" >&2
  exit 1
fi
# Debian packages the tests need, installed with apt-get when missing (as root, else with sudo).
apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null 2>&1 || return 1
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "$@"
}
if ! command -v tmux >/dev/null 2>&1; then
  echo "scripts/test.sh: installing tmux (needed by tui/tests/terminal.rs)"
  if ! apt_install tmux; then
    echo "scripts/test.sh: tmux is missing and apt-get could not install it: install tmux, then run this again" >&2
    exit 1
  fi
fi
# The browser test (kernel/tests/jupyter.rs `browser`) drives Debian's Chromium through its
# chromedriver. Where they cannot be installed it is skipped, saying so; once they are here,
# DDP_BROWSER_REQUIRED=1 makes their absence a failure instead.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "scripts/test.sh: installing chromium and chromium-driver (needed by the browser test)"
  apt_install chromium chromium-driver \
    || echo "scripts/test.sh: could not install chromium and chromium-driver: the browser test (kernel/tests/jupyter.rs browser) will be SKIPPED" >&2
fi
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  export DDP_BROWSER_REQUIRED=1
fi
# trainer/tests/two_hosts.rs runs two replicas in two network namespaces (scripts/two-hosts.sh:
# ip, tc, unshare; root). Where namespaces can be made, DDP_TWO_HOSTS_REQUIRED=1 makes the test
# fail rather than skip.
if [[ $(id -u) == 0 ]] && { ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; }; then
  echo "scripts/test.sh: installing iproute2 (needed by trainer/tests/two_hosts.rs)"
  apt_install iproute2 || echo "scripts/test.sh: could not install iproute2: the two-host test will be SKIPPED" >&2
fi
if [[ $(id -u) == 0 ]] && command -v ip >/dev/null 2>&1 && ip netns add "ddpprobe$$" 2>/dev/null; then
  ip netns del "ddpprobe$$"
  export DDP_TWO_HOSTS_REQUIRED=1
else
  echo "scripts/test.sh: no network namespaces here (not root, or not permitted): the two-host test will be SKIPPED" >&2
fi
# Two real two-node Slurm clusters (scripts/slurm-cluster.sh, docs/slurm.md) in temporary
# folders, for the tests that submit to Slurm (they find them through DDP_TEST_SLURM, a list like
# PATH; each test holds one cluster, so two run side by side), stopped when this script exits
# however it ends. Where they cannot be brought up the tests are skipped, saying so; with
# DDP_TEST_SLURM_REQUIRED=1 (CI's .ci/run sets it) that is a failure instead, here at once.
slurm_dirs=()
stop_slurm() {
  local dir
  for dir in "${slurm_dirs[@]}"; do
    if ! scripts/slurm-cluster.sh down "$dir" >/dev/null 2>"$dir.down.log"; then
      echo "scripts/test.sh: stopping the Slurm test cluster in $dir failed:" >&2
      cat "$dir.down.log" >&2
    else
      rm -rf "$dir"
    fi
    rm -f "$dir.down.log"
  done
}
# A real Spark standalone cluster (scripts/spark-cluster.sh: a master and two one-core workers,
# PySpark from the test venv, Java from the distribution) for tests/tests/spark.rs, through
# DDP_TEST_SPARK; skipped where it cannot start, a failure with DDP_TEST_SPARK_REQUIRED=1 (CI).
spark_dir=""
stop_clusters() {
  stop_slurm
  [ -z "${venv_pid:-}" ] || kill "$venv_pid" 2>/dev/null || true
  rm -f "${venv_out:-}"
  if [ -n "$spark_dir" ]; then
    DDP_SPARK_PYTHON=$DDP_TEST_PYTHON scripts/spark-cluster.sh down "$spark_dir" >/dev/null 2>&1 || true
    rm -rf "$spark_dir"
  fi
}
trap stop_clusters EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
slurm_ok=1
# One after the other: the first may install Slurm with apt-get.
for _ in 1 2; do
  dir=$(mktemp -d "${TMPDIR:-/tmp}/ddp-slurm.XXXXXX")
  slurm_dirs+=("$dir")
  scripts/slurm-cluster.sh up "$dir" || { slurm_ok=0; break; }
done
if [ $slurm_ok = 1 ]; then
  DDP_TEST_SLURM=$(IFS=:; echo "${slurm_dirs[*]}")
  export DDP_TEST_SLURM
elif [ "${DDP_TEST_SLURM_REQUIRED:-}" = 1 ]; then
  echo "scripts/test.sh: the Slurm test clusters could not be brought up (see above) and DDP_TEST_SLURM_REQUIRED=1: failing" >&2
  exit 1
else
  echo "scripts/test.sh: no Slurm test clusters (see above): the Slurm tests (tests/tests/slurm.rs and every test that needs a real Slurm) will be SKIPPED" >&2
fi
# kernel/tests/jupyter.rs runs its Python scripts with $DDP_TEST_PYTHON (scripts/python-venv.sh),
# which the Spark test cluster runs PySpark from. The venv is made (pip, half a minute on a fresh
# machine) while the tests build, after the Slurm clusters, whose first start may use apt-get.
venv_out=$(mktemp "${TMPDIR:-/tmp}/ddp-venv.XXXXXX")
scripts/python-venv.sh >"$venv_out" &
venv_pid=$!
# Clippy lints the workspace's crates while they are compiled for the tests (clippy-driver as
# cargo's workspace wrapper, which is what `cargo clippy` does around `cargo check`), so the
# dependencies are not checked a second time: `cargo clippy --workspace --all-targets -- -D
# warnings` finds the same. The environment stays set while the tests run: the tests'
# own `cargo test --workspace --no-run` (ddp_e2e::binaries) finds everything built. Benches are
# built (and linted) first; `cargo test` does not build them.
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)
if [ -z "$clippy_driver" ]; then
  echo "scripts/test.sh: clippy-driver not found: rustup component add clippy" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
lint_hint() {
  echo "scripts/test.sh: building the tests failed: a compile error or a clippy warning (clippy's lints are errors here), shown above; \`cargo clippy --workspace --all-targets -- -D warnings\` shows the warnings alone" >&2
}
if ! cargo test --workspace --locked --benches --no-run; then
  lint_hint
  exit 1
fi
if ! cargo test --workspace --locked --no-run; then
  lint_hint
  exit 1
fi
if ! wait "$venv_pid"; then
  echo "scripts/test.sh: making the Python test venv failed (scripts/python-venv.sh, above)" >&2
  exit 1
fi
venv_pid=""
DDP_TEST_PYTHON=$(cat "$venv_out")
rm -f "$venv_out"
export DDP_TEST_PYTHON
spark_dir=$(mktemp -d "${TMPDIR:-/tmp}/ddp-spark.XXXXXX")
if DDP_SPARK_PYTHON=$DDP_TEST_PYTHON scripts/spark-cluster.sh up "$spark_dir" >/dev/null; then
  DDP_TEST_SPARK=$spark_dir
  export DDP_TEST_SPARK
elif [ "${DDP_TEST_SPARK_REQUIRED:-}" = 1 ]; then
  echo "scripts/test.sh: the Spark test cluster could not be brought up (see above) and DDP_TEST_SPARK_REQUIRED=1: failing" >&2
  exit 1
else
  echo "scripts/test.sh: no Spark test cluster (see above): the Spark tests (tests/tests/spark.rs) will be SKIPPED" >&2
fi
# The tests: cargo-nextest runs every test in its own process, several at once, as
# .config/nextest.toml says (the long chains first; notebooks one at a time, one test per Slurm
# cluster); then the doc tests, which nextest does not run. Arguments go to nextest (filters:
# `scripts/test.sh -E 'binary(slurm)'`). Without nextest, cargo test runs them one binary at a time.
# Everything is built: the tests use the executables as they are (ddp_trainer::test_util::
# fixtures::workspace_binaries runs no build of its own while other tests run).
export DDP_TEST_PREBUILT=1
if cargo nextest --version >/dev/null 2>&1; then
  status=0
  cargo nextest run --workspace --locked "$@" || status=$?
  cargo test --workspace --locked --doc || status=$?
  exit "$status"
else
  echo "scripts/test.sh: cargo-nextest is not installed (cargo install --locked cargo-nextest): running the tests with cargo test, one binary at a time" >&2
  cargo test --workspace --locked "$@"
fi
