#!/usr/bin/env bash
# The workspace at 10,000 runs (docs/performance.md "10,000 runs"): `ddp ls`, the TUI and
# `%ddp ls` on the run index, with the figures of a build without the index beside them.
#
#   scripts/bench-index.sh                        # makes the workspace (one real run, copied)
#   scripts/bench-index.sh --workspace /tmp/ws10k # an existing one (scripts/make-workspace.py)
#   scripts/bench-index.sh --base PATH/TO/ddp     # also time that build's `ddp ls` (the folder scan)
#
# Prints, each beside its goal: building the index from nothing; `ddp ls --limit 50` and a
# filtered, sorted `ddp ls` (median of 5, warm page cache; then with the page cache dropped
# where root may); the peak RSS of each; the TUI's first frame, a filter typed key by key, a run
# created beside it and its RSS (tui/benches/dashboard.rs --workspace); `%ddp ls` through a real
# Jupyter client and the kernel's RSS (kernel/bench/kernel_bench.py --parts large; needs
# scripts/python-venv.sh's .venv-test).
set -euo pipefail
cd "$(dirname "$0")/.."
WS="" RUNS=10000 BASE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --workspace) WS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --base) BASE=$2; shift 2 ;;
    *) echo "usage: $0 [--workspace WS] [--runs N] [--base DDP]" >&2; exit 2 ;;
  esac
done
cargo build --release -q -p ddp-cli -p ddp-kernel
DDP=$PWD/target/release/ddp
if [ -z "$WS" ]; then
  tmp=$(mktemp -d)
  WS=$tmp/ws
  echo "making one real run, then $RUNS copies of it in $WS"
  "$DDP" --workspace "$tmp/src" run examples/mnist.toml --set train.epochs=1 \
    --set data.limit_train=600 --set data.limit_test=100 > "$tmp/src.log"
  src=$(ls -d "$tmp"/src/experiments/*/runs/* | head -1)
  python3 scripts/make-workspace.py --from "$src" --runs "$RUNS" --out "$WS"
fi
FILTER=(--where 'spec.train.lr < 0.01 and status = "completed"' --sort -test_accuracy --limit 20)

# Seconds and peak RSS (MB) of one command, its output dropped.
timed() {
  /usr/bin/time -f "%e %M" -o /tmp/bench-index.time "$@" > /dev/null
  awk '{ printf "%.3f %.0f\n", $1, $2 / 1024 }' /tmp/bench-index.time
}
# The median seconds and the largest RSS of five runs.
median5() {
  for _ in 1 2 3 4 5; do timed "$@"; done | sort -n |
    awk '{ s[NR] = $1; if ($2 > m) m = $2 } END { printf "%.0f ms (of 5: %.0f..%.0f), %d MB", s[3] * 1000, s[1] * 1000, s[5] * 1000, m }'
}
drop_caches() { sync && echo 3 > /proc/sys/vm/drop_caches 2> /dev/null; }

runs=$(ls -d "$WS"/experiments/*/runs/* | wc -l)
echo "workspace $WS: $runs runs, $(du -sh "$WS" | cut -f1)"
rm -f "$WS"/index.sqlite "$WS"/index.sqlite-wal "$WS"/index.sqlite-shm
read -r s mb < <(timed "$DDP" --workspace "$WS" ls --limit 1)
echo "index built from the folders (the first ls): $s s, $mb MB; $(du -h "$WS/index.sqlite" | cut -f1)"
echo "ddp ls --limit 50 (goal <= 150 ms, <= 150 MB): $(median5 "$DDP" --workspace "$WS" ls --limit 50)"
echo "ddp ls ${FILTER[*]} (goal <= 300 ms): $(median5 "$DDP" --workspace "$WS" ls "${FILTER[@]}")"
if drop_caches; then
  read -r s mb < <(timed "$DDP" --workspace "$WS" ls --limit 50)
  echo "page cache dropped: ddp ls --limit 50 $s s"
  drop_caches
  read -r s mb < <(timed "$DDP" --workspace "$WS" ls "${FILTER[@]}")
  echo "page cache dropped: filtered ddp ls $s s"
fi
if [ -n "$BASE" ]; then
  echo "base $BASE, ls --limit 50: $(median5 "$BASE" --workspace "$WS" ls --limit 50)"
  echo "base $BASE, filtered ls: $(median5 "$BASE" --workspace "$WS" ls "${FILTER[@]}")"
  if drop_caches; then
    read -r s mb < <(timed "$BASE" --workspace "$WS" ls --limit 50)
    echo "base, page cache dropped: ddp ls --limit 50 $s s"
  fi
fi
echo "ddp-tui:"
cargo bench -q -p ddp-tui --bench dashboard -- --workspace "$WS" | sed 's/^/  /'
if [ -x .venv-test/bin/python ]; then
  echo "ddp-kernel:"
  .venv-test/bin/python kernel/bench/kernel_bench.py --parts large --workspace "$WS" | sed 's/^/  /'
else
  echo "ddp-kernel: skipped (make .venv-test with scripts/python-venv.sh)"
fi
