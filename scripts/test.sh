#!/usr/bin/env bash
# The test command (README, CI's .ci/run): installs what the tests need that cargo does not
# (tmux, for the dashboard's end-to-end test in a real terminal; a Python venv with pinned Jupyter
# clients, for the kernel's tests with real Jupyter clients), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v tmux >/dev/null 2>&1; then
  echo "scripts/test.sh: installing tmux (needed by tui/tests/terminal.rs)"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if command -v apt-get >/dev/null 2>&1; then
    $sudo apt-get update -qq && $sudo apt-get install -y -qq tmux
  else
    echo "scripts/test.sh: tmux is missing and there is no apt-get here: install tmux, then run this again" >&2
    exit 1
  fi
fi
# kernel/tests/jupyter.rs runs its Python scripts with $DDP_TEST_PYTHON (scripts/python-venv.sh).
DDP_TEST_PYTHON=$(scripts/python-venv.sh)
export DDP_TEST_PYTHON
# A one-off full run gains nothing from incremental caches, which would add gigabytes to target/.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
cargo test --workspace --locked "$@"
