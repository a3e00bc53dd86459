#!/usr/bin/env bash
# Regenerates a committed notebook's outputs.
#
#   scripts/refresh-notebook.sh                   # mnist-ddp.ipynb and the screenshots
#   scripts/refresh-notebook.sh gpt-shakespeare   # gpt-shakespeare.ipynb (trains for minutes)
#   scripts/refresh-notebook.sh own-data          # own-data.ipynb (three runs and a cell's build)
#
# For mnist-ddp, the tutorial's outputs and the screenshots docs/kernel.md shows:
#   1. executes examples/notebooks/mnist-ddp.ipynb on the `ddp` kernel (nbclient) and saves it
#      with its outputs (kernel/tests/jupyter.rs `notebook`, DDP_NOTEBOOK_WRITE);
#   2. opens it untrusted in JupyterLab in headless Chromium and saves the screenshots into
#      docs/images/ (kernel/tests/jupyter.rs `browser`, DDP_BROWSER_SCREENSHOTS).
# Needs what scripts/test.sh installs (the test venv, chromium, chromedriver).
set -euo pipefail
cd "$(dirname "$0")/.."
DDP_TEST_PYTHON=$(scripts/python-venv.sh)
export DDP_TEST_PYTHON DDP_BROWSER_REQUIRED=1
case "${1:-mnist-ddp}" in
  gpt-shakespeare | own-data)
    test=$(echo "$1" | sed 's/gpt-shakespeare/gpt/; s/own-data/own_data/')_notebook
    DDP_NOTEBOOK_WRITE=$PWD/examples/notebooks/$1.ipynb \
      cargo test --locked -p ddp-kernel --test jupyter -- --ignored --exact "$test"
    echo "refreshed examples/notebooks/$1.ipynb"
    exit 0
    ;;
esac
DDP_NOTEBOOK_WRITE=$PWD/examples/notebooks/mnist-ddp.ipynb \
  cargo test --locked -p ddp-kernel --test jupyter -- --exact notebook
shots=$(mktemp -d)
trap 'rm -rf "$shots"' EXIT
DDP_BROWSER_SCREENSHOTS=$shots cargo test --locked -p ddp-kernel --test jupyter -- --exact browser
mkdir -p docs/images
for name in card-0 plot compare live-card interrupted-wait rust-error; do
  cp "$shots/$name.png" "docs/images/notebook-$name.png"
done
echo "refreshed examples/notebooks/mnist-ddp.ipynb and docs/images/notebook-*.png"
