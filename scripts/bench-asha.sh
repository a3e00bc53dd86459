#!/usr/bin/env bash
# ASHA against the full search, on the shipped MNIST sample (the reference CNN, one replica of
# one thread per trial, two trials at a time): the same 27 random trials (train.lr loguniform
# 1e-4..1e-1, batch 16/32/64, adam/sgd, seed 7), once with ASHA (val_accuracy, rungs 1, 3, 9
# epochs, eta 3) and once each trained to 9 epochs. Prints the best test accuracy of each, the
# epochs each trained and their wall times.
#
#   scripts/bench-asha.sh            # about 20 min on 2 cores
#   WS=/tmp/asha-ws scripts/bench-asha.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ddp-cli
DDP=$PWD/target/release/ddp
WS=${WS:-$(mktemp -d)/ws}
common=(examples/mnist.toml --replicas 1 --set ddp.threads=1 --set train.epochs=9
  --param train.lr=loguniform:1e-4:1e-1 --param train.batch_size=choice:16,32,64
  --param train.optimizer=choice:adam,sgd --trials 27 --seed 7 --max-parallel 2)
t0=$(date +%s.%N)
"$DDP" --workspace "$WS" sweep "${common[@]}" --name asha --scheduler asha \
  --metric val_accuracy --min-budget 1 --max-budget 9 --eta 3 > "$WS.asha.log"
t1=$(date +%s.%N)
"$DDP" --workspace "$WS" sweep "${common[@]}" --name full > "$WS.full.log"
t2=$(date +%s.%N)
"$DDP" --workspace "$WS" compare --sweep asha --json > "$WS.asha.json"
"$DDP" --workspace "$WS" compare --sweep full --json > "$WS.full.json"
python3 - "$WS" "$t0" "$t1" "$t2" <<'PY'
import json, sys
ws, t0, t1, t2 = sys.argv[1], *map(float, sys.argv[2:])
def figures(name):
    runs = json.load(open(f"{ws}.{name}.json"))["runs"]
    epochs = sum(r["summary"]["epochs_done"] for r in runs)
    tested = [r for r in runs if r["summary"]["test_accuracy"] is not None]
    best = max(tested, key=lambda r: r["summary"]["test_accuracy"])
    return len(runs), epochs, best["summary"]["test_accuracy"], best["name"]
a, f = figures("asha"), figures("full")
print(f"{'search':<8} {'trials':>6} {'epochs':>7} {'best test acc':>14} {'wall s':>8}  best trial")
print(f"{'asha':<8} {a[0]:>6} {a[1]:>7} {a[2]*100:>13.2f}% {t1-t0:>8.0f}  {a[3]}")
print(f"{'full':<8} {f[0]:>6} {f[1]:>7} {f[2]*100:>13.2f}% {t2-t1:>8.0f}  {f[3]}")
print(f"asha: {a[1]/f[1]*100:.0f} % of the full search's epochs, best test accuracy "
      f"{(a[2]-f[2])*100:+.2f} points against it")
PY
