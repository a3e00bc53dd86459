#!/usr/bin/env bash
# Losing replicas mid-run: an elastic run (ddp.elastic) against a restart from the newest
# checkpoint (restart.max_restarts), each the reference CNN recipe (examples/mnist.toml) with 4
# replicas of 1 thread, through `ddp run`. Prints one markdown table (docs/performance.md,
# "Losing replicas"); scripts/bench_elastic.py says what each scenario does and measures.
#
#   scripts/bench-elastic.sh [--seed 7] [--epochs 8]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
echo "bench-elastic: building ddp (release)" >&2
cargo build --release --locked -q -p ddp-cli --manifest-path "$root/Cargo.toml"
exec python3 "$root/scripts/bench_elastic.py" "$root/target/release/ddp" "$@"
