#!/usr/bin/env bash
# Runs on Spark against the local launcher and against Spark's TorchDistributor, on the
# standalone cluster of scripts/spark-cluster.sh (a master and two one-core workers, brought up
# in a temporary folder and stopped at the end). Prints one markdown table (docs/performance.md,
# "Runs on Spark"); scripts/bench_spark.py says what each side runs and measures.
#
#   scripts/bench-spark.sh [--repeat 3] [--epochs 2]
#
# Spark's client: $DDP_SPARK_PYTHON (a Python with pyspark; Java from JAVA_HOME or the PATH). The
# PyTorch side needs torch and numpy in that same Python (the executors run it); without them it
# is left out of the table, saying so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${DDP_SPARK_PYTHON:-python3}
echo "bench-spark: building ddp (release)" >&2
cargo build --release --locked -q -p ddp-cli --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
trap '"$root/scripts/spark-cluster.sh" down "$work/cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
DDP_SPARK_PYTHON=$py "$root/scripts/spark-cluster.sh" up "$work/cluster" >/dev/null
DDP_SPARK_PYTHON=$py "$py" "$root/scripts/bench_spark.py" "$root/target/release/ddp" \
  "$(cat "$work/cluster/master")" "$work" "$@"
