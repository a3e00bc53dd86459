#!/usr/bin/env bash
# Regenerates the committed tutorial's outputs and the screenshots docs/kernel.md shows:
#   1. executes examples/notebooks/mnist-ddp.ipynb on the `ddp` kernel (nbclient) and saves it
#      with its outputs (kernel/tests/jupyter.rs `notebook`, DDP_NOTEBOOK_WRITE);
#   2. opens it untrusted in JupyterLab in headless Chromium and saves the screenshots into
#      docs/images/ (kernel/tests/jupyter.rs `browser`, DDP_BROWSER_SCREENSHOTS).
# Needs what scripts/test.sh installs (the test venv, chromium, chromedriver).
set -euo pipefail
cd "$(dirname "$0")/.."
DDP_TEST_PYTHON=$(scripts/python-venv.sh)
export DDP_TEST_PYTHON DDP_BROWSER_REQUIRED=1
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
