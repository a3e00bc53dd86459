#!/usr/bin/env bash
# DDP across a link of known speed, against PyTorch DDP on the same link: two hosts in network
# namespaces (scripts/two-hosts.sh), one replica on each, both engines started as torchrun starts
# them, ddp and PyTorch alternating round by round, each uncompressed, with bf16 gradients
# (ddp.compression = "bf16"; PyTorch's bf16_compress_hook) and with PowerSGD of rank 4
# (ddp.compression = "powersgd"; PyTorch's powerSGD_hook, from step 2 as ours). Prints one
# markdown table per model.
#
#   scripts/bench-network.sh PYTHON [--rates "1gbit 200mbit"] [--rounds 2] [--models "resnet18 gpt"]
#                                   [--threads 1]
#
# PYTHON: a Python with torch and torchvision (bench/pytorch/README.md). Needs root.
# ResNet-18: CIFAR stem, synthetic 3x32x32, batch 32 per replica, SGD momentum 0.9, buckets of
# 25 MB (both engines). GPT: 6 layers, 6 heads, embd 384, block 128 (10.7 M parameters),
# char-level on examples/data/shakespeare, 8 windows per replica, AdamW, clip 1.0.
# A figure is the median step time of 8 steps after 2 warm-up steps (ddp: from the train
# records' times; PyTorch: bench/pytorch/torch_network.py), throughput = 2 replicas' samples
# (tokens) over it; the table shows each engine's best round.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench-network: error: $*" >&2; exit 2; }
[[ $# -ge 1 ]] || die "usage: bench-network.sh PYTHON [--rates R] [--rounds N] [--models M] [--threads T]"
py=$1; shift
rates="1gbit 200mbit"; rounds=2; models="resnet18 gpt"; threads=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --rates) rates=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
"$py" -c "import torch, torchvision" 2>/dev/null || die "$py cannot import torch and torchvision"
[[ $(id -u) == 0 ]] || die "network namespaces need root"

echo "bench-network: building ddp-trainer (release)" >&2
cargo build --release --locked -q -p ddp-trainer --bin ddp-trainer --manifest-path "$repo/Cargo.toml"
trainer=$repo/target/release/ddp-trainer
hosts=$repo/scripts/two-hosts.sh
export DDP_HOSTS_NAME=ddpbench DDP_HOSTS_NET=200
work=$(mktemp -d)
trap '"$hosts" down; rm -rf "$work"' EXIT
"$hosts" up none
addr0=$("$hosts" addr 0)
text=$repo/examples/data/shakespeare/input.txt
steps=10 warmup=2

spec_for() {
  case $1 in
    resnet18) cat <<EOF
name = "bench-network-resnet18"
[model]
name = "resnet18"
[data]
name = "synthetic"
task = "classification"
shape = [3, 32, 32]
classes = 10
train_size = 4096
test_size = 32
val_fraction = 0.0
[train]
epochs = 1
max_steps = $steps
batch_size = 32
optimizer = "sgd"
lr = 0.05
momentum = 0.9
log_every = 1
[ddp]
timeout_s = 120
[checkpoint]
every_epochs = 0
EOF
    ;;
    gpt) cat <<EOF
name = "bench-network-gpt"
[model]
name = "gpt"
layers = 6
heads = 6
embd = 384
block = 128
[data]
name = "text"
path = "$text"
tokenizer = "char"
val_fraction = 0.1
[train]
steps = $steps
batch_size = 8
optimizer = "adamw"
lr = 1e-3
grad_clip = 1.0
log_every = 1
eval_every = 1000
[ddp]
timeout_s = 120
[checkpoint]
every_steps = 1000
EOF
    ;;
  esac
}

# The median step time of ddp's run in $1 (rank 0's train records after the warm-up).
ddp_median() {
  python3 - "$1/metrics/rank-0.jsonl" "$warmup" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
t = [r["time"] for r in recs if r["kind"] == "train"]
d = [b - a for a, b in zip(t, t[1:])][int(sys.argv[2]) - 1:]
print(round(statistics.median(d), 4))
EOF
}

run_ddp() { # model out extra-set...
  local model=$1 out=$2; shift 2
  spec_for "$model" > "$work/$model.toml"
  local port=$((29700 + RANDOM % 200)) sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  for h in 0 1; do
    "$hosts" run "$h" env MASTER_ADDR="$addr0" MASTER_PORT=$port WORLD_SIZE=2 RANK=$h LOCAL_RANK=0 \
      LOCAL_WORLD_SIZE=1 RAYON_NUM_THREADS="$threads" \
      "$trainer" "$work/$model.toml" --out "$out/h$h" "${sets[@]}" > "$out.$h.log" 2>&1 &
    pids[h]=$!
  done
  for h in 0 1; do wait "${pids[h]}" || failed ddp "$out.$h.log"; done
  ddp_median "$out/h0"
}

run_torch() { # model out [torch_network.py flags...]
  local model=$1 out=$2 port=$((29900 + RANDOM % 90)) extra=()
  shift 2
  extra=("$@")
  [[ $model == gpt ]] && extra+=(--text "$text")
  for h in 0 1; do
    "$hosts" run "$h" env MASTER_ADDR="$addr0" MASTER_PORT=$port WORLD_SIZE=2 RANK=$h LOCAL_RANK=0 \
      LOCAL_WORLD_SIZE=1 GLOO_SOCKET_IFNAME="v${DDP_HOSTS_NAME}$h" \
      "$py" "$repo/bench/pytorch/torch_network.py" --model "$model" --steps $((steps - warmup)) \
      --warmup "$warmup" --threads "$threads" "${extra[@]}" > "$out.$h.log" 2>&1 &
    pids[h]=$!
  done
  # A failed reference run is a "failed" cell of the table (its log's end on stderr).
  local ok=1
  for h in 0 1; do
    wait "${pids[h]}" || { ok=0; echo "bench-network: a PyTorch rank failed ($*); the end of $out.$h.log:" >&2; tail -8 "$out.$h.log" >&2; }
  done
  [[ $ok == 1 ]] || { echo nan; return; }
  # The last JSON line (gloo may print warnings after it).
  python3 -c 'import json,sys; print(json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])["median_step_s"])' "$out.0.log"
}

# A rank of a run failed: its log's end, then stop (the work folder is removed on exit).
failed() {
  echo "bench-network: a $1 rank failed; the end of $2:" >&2
  tail -20 "$2" >&2
  exit 1
}

best() { printf '%s\n' "$@" | sort -g | head -1; }

for model in $models; do
  unit=samples; per=64
  [[ $model == gpt ]] && { unit=tokens; per=$((2 * 8 * 128)); }
  echo
  echo "### $model, 2 hosts x 1 replica, $threads thread(s) each"
  echo
  echo "| link | ddp ($unit/s) | ddp not overlapped | ddp bf16 | ddp PowerSGD r4 | PyTorch DDP (gloo) | PyTorch bf16 hook | PyTorch PowerSGD r4 | ddp / PyTorch | ddp bf16 / PyTorch bf16 | ddp PowerSGD / PyTorch PowerSGD | ddp PowerSGD / ddp |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for rate in $rates; do
    "$hosts" rate "$rate"
    ov=(); no=(); bf=(); ps=(); pt=(); pb=(); pp=()
    for ((r = 0; r < rounds; r++)); do
      ov+=("$(run_ddp "$model" "$work/ov-$r")")
      pt+=("$(run_torch "$model" "$work/pt-$r")")
      bf+=("$(run_ddp "$model" "$work/bf-$r" 'ddp.compression="bf16"')")
      pb+=("$(run_torch "$model" "$work/pb-$r" --hook bf16)")
      ps+=("$(run_ddp "$model" "$work/ps-$r" 'ddp.compression="powersgd"' ddp.powersgd_rank=4)")
      pp+=("$(run_torch "$model" "$work/pp-$r" --hook powersgd --powersgd-rank 4)")
      no+=("$(run_ddp "$model" "$work/no-$r" ddp.overlap=false)")
      rm -rf "$work"/ov-$r "$work"/no-$r "$work"/bf-$r "$work"/ps-$r
    done
    python3 - "$rate" "$per" "$(best "${ov[@]}")" "$(best "${no[@]}")" "$(best "${bf[@]}")" \
      "$(best "${ps[@]}")" "$(best "${pt[@]}")" "$(best "${pb[@]}")" "$(best "${pp[@]}")" <<'EOF'
import sys
rate, per = sys.argv[1], int(sys.argv[2])
ov, no, bf, ps, pt, pb, pp = (float(x) for x in sys.argv[3:10])
f = lambda s: "failed" if s != s else f"{per / s:,.1f} ({s:.3f} s/step)"
x = lambda a, b: "-" if a != a or b != b else f"{a / b:.2f}x"
print(f"| {rate} | {f(ov)} | {f(no)} | {f(bf)} | {f(ps)} | {f(pt)} | {f(pb)} | {f(pp)} | "
      f"{x(pt, ov)} | {x(pb, bf)} | {x(pp, ps)} | {x(ov, ps)} |")
EOF
  done
done
