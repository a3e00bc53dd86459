#!/usr/bin/env bash
# What following runs on Slurm costs, on the test cluster of scripts/slurm-cluster.sh:
#   1. submit → running: `ddp run --on slurm` of a short run on an idle cluster, N times: the
#      seconds `ddp run` takes to submit and return, and from its start until run.json says
#      running (Slurm's scheduling plus the watcher's next poll);
#   2. the status poll with 100 live runs: 100 runs submitted held (`--begin=now+1hour`, so they
#      stay pending), then for 60 s the `squeue` calls the workspace's watcher makes (counted by
#      a logging `squeue` first in PATH) and the CPU time the watcher uses.
#
#   scripts/bench-slurm.sh [N]        (default 5; needs root or an installed Slurm, and cargo)
#
# The cluster is brought up in a temporary folder and stopped at the end.
set -euo pipefail
n=${1:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && cargo build --release --locked -q -p ddp-cli)
ddp=$root/target/release/ddp
work=$(mktemp -d)
cluster=$work/cluster
trap '"$root/scripts/slurm-cluster.sh" down "$cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$root/scripts/slurm-cluster.sh" up "$cluster" >/dev/null
# shellcheck disable=SC1091
source "$cluster/env"
cd "$cluster"
now() { date +%s.%N; }
status() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$1"; }

echo "submit → running, $n runs of examples/mnist.toml (2 steps) on an idle 2-node cluster:"
for i in $(seq "$n"); do
    ws=$work/ws-$i
    t0=$(now)
    "$ddp" --workspace "$ws" run "$root/examples/mnist.toml" --on slurm --nodes 2 \
        --set train.max_steps=2 --set data.limit_test=100 >/dev/null
    t1=$(now)
    json=$(ls "$ws"/experiments/*/runs/*/run.json)
    until [ "$(status "$json")" != queued ]; do sleep 0.02; done
    t2=$(now)
    python3 -c "print(f'  run {$i}: submitted in {$t1 - $t0:.2f} s, running after {$t2 - $t0:.2f} s')"
    until [ "$(status "$json")" = completed ]; do sleep 0.1; done
done

echo "status poll with 100 live (held) runs, for 60 s:"
bin=$work/bin
mkdir -p "$bin"
real=$(command -v squeue)
cat >"$bin/squeue" <<EOF
#!/bin/sh
echo call >> "$work/squeue.calls"
exec "$real" "\$@"
EOF
chmod +x "$bin/squeue"
ws=$work/ws-held
export PATH=$bin:$PATH
for i in $(seq 100); do
    "$ddp" --workspace "$ws" run "$root/examples/mnist.toml" --on slurm --nodes 2 \
        --sbatch-arg=--begin=now+1hour >/dev/null
done
sleep 30 # let the watcher back off to its resting interval
pid=$(pgrep -f "__slurm-watch $ws" | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
: >"$work/squeue.calls"
c0=$(ticks)
sleep 60
c1=$(ticks)
calls=$(wc -l <"$work/squeue.calls")
hz=$(getconf CLK_TCK)
python3 -c "print(f'  squeue calls in 60 s: {$calls}; watcher CPU: {($c1 - $c0) / $hz:.2f} s in 60 s ({($c1 - $c0) / $hz / 60 * 100:.1f}% of a core)')"
scancel -u "$(id -un)"
