#!/usr/bin/env bash
# DDP across a link of known speed, against PyTorch DDP on the same link: two hosts in network
# namespaces (scripts/two-hosts.sh), one replica on each, both engines started as torchrun starts
# them, ddp and PyTorch alternating round by round, each uncompressed, with bf16 gradients
# (ddp.compression = "bf16"; PyTorch's bf16_compress_hook) and with PowerSGD of rank 4
# (ddp.compression = "powersgd"; PyTorch's powerSGD_hook, from step 2 as ours). Prints one
# markdown table per model and layout, then the share of communication each step waited for and
# the bytes the link carried. Layouts: 1x1 (one replica on each of the 2 hosts) and 2xL (L on
# each, ranks of one host adjacent in the ring as torchrun numbers them).
#
#   scripts/bench-network.sh PYTHON [--rates "1gbit 200mbit"] [--rounds 2] [--models "resnet18 gpt"]
#                                   [--threads 1] [--layouts "1x1 2x2"]
#
# PYTHON: a Python with torch and torchvision (bench/pytorch/README.md). Needs root.
# ResNet-18: CIFAR stem, synthetic 3x32x32, batch 32 per replica, SGD momentum 0.9, buckets of
# 25 MB (both engines). GPT: 6 layers, 6 heads, embd 384, block 128 (10.7 M parameters),
# char-level on examples/data/shakespeare, 8 windows per replica, AdamW, clip 1.0.
# A figure is the median step time of 8 steps after 2 warm-up steps (ddp: from the train
# records' times; PyTorch: bench/pytorch/torch_network.py), throughput = all replicas' samples
# (tokens) over it; the table shows each engine's best round. "ddp auto" is ddp.bucket_mb =
# "auto". Link MB: each host's veth tx counter, sampled every 20 ms, between the end of the
# warm-up and the last step (interpolated), per step and direction (the mean of the two), with
# Ethernet, IP and TCP headers. Exposed: the median over the timed steps of rank 0's breakdown,
# communication the step waited for / communication time.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench-network: error: $*" >&2; exit 2; }
[[ $# -ge 1 ]] || die "usage: bench-network.sh PYTHON [--rates R] [--rounds N] [--models M] [--threads T] [--layouts L]"
py=$1; shift
rates="1gbit 200mbit"; rounds=2; models="resnet18 gpt"; threads=1; layouts="1x1 2x2"
while [[ $# -gt 0 ]]; do
  case $1 in
    --rates) rates=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
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

# Samples a host's veth tx byte counter every 20 ms into $2 ("unix-time bytes" lines) until
# killed. Runs in the host's network namespace (its /sys/class/net).
start_sampler() { # host file
  ip netns exec "${DDP_HOSTS_NAME}$1" python3 -c '
import sys, time
dev, out = sys.argv[1], open(sys.argv[2], "w", buffering=1)
path = f"/sys/class/net/{dev}/statistics/tx_bytes"
while True:
    out.write(f"{time.time()} {open(path).read().strip()}\n")
    time.sleep(0.02)
' "v${DDP_HOSTS_NAME}$1" "$2" &
  samplers+=($!)
}
stop_samplers() {
  kill "${samplers[@]}" 2>/dev/null || true
  wait "${samplers[@]}" 2>/dev/null || true
  samplers=()
}

# Prints "MEDIAN_STEP_S EXPOSED_SHARE LINK_MB_PER_STEP" of a run: from ddp's rank-0 metrics
# ($1 = "ddp:RUN_DIR") or PyTorch's summary line ($1 = "torch:LOG"), and the samplers' files
# $2 and $3.
measure() {
  python3 - "$1" "$2" "$3" "$warmup" <<'EOF'
import bisect, json, statistics, sys
src, tx0, tx1, warmup = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
kind, path = src.split(":", 1)
if kind == "ddp":
    recs = [json.loads(l) for l in open(f"{path}/metrics/rank-0.jsonl")]
    train = [r for r in recs if r["kind"] == "train"]
    t = [r["time"] for r in train]
    median = statistics.median([b - a for a, b in zip(t, t[1:])][warmup - 1:])
    shares = [r["breakdown"]["comm_exposed_s"] / r["breakdown"]["comm_s"]
              for r in train[warmup:] if (r.get("breakdown") or {}).get("comm_s")]
    exposed = statistics.median(shares) if shares else float("nan")
    t_from, t_to, steps = t[warmup - 1], t[-1], len(t) - warmup
else:
    lines = [l for l in open(path) if l.startswith("{")]
    if not lines:
        print("nan nan nan")
        sys.exit()
    s = json.loads(lines[-1])
    median, exposed = s["median_step_s"], float("nan")
    t_from, t_to, steps = s["timed_from"], s["timed_to"], len(s["step_s"])

def at(f, when):
    pts = [tuple(map(float, l.split())) for l in open(f) if len(l.split()) == 2]
    ts = [p[0] for p in pts]
    i = min(max(bisect.bisect_left(ts, when), 1), len(pts) - 1)
    (a, x), (b, y) = pts[i - 1], pts[i]
    return x + (y - x) * (when - a) / (b - a) if b > a else y

per_dir = [(at(f, t_to) - at(f, t_from)) / steps for f in (tx0, tx1)]
print(f"{median:.4f} {exposed:.3f} {statistics.mean(per_dir) / 1e6:.2f}")
EOF
}

# Runs one engine's ranks on the two hosts, 2 x L ($layout): rank h*L + l is replica l of host
# h, as torchrun numbers them (the ranks of a host adjacent in the ring).
launch() { # log-prefix command... (RANK and friends in the environment of each)
  local prefix=$1 port=$((29700 + RANDOM % 290)) ll=${layout#*x} h l ok=1 pids=()
  shift
  start_sampler 0 "$prefix.tx0"; start_sampler 1 "$prefix.tx1"
  for h in 0 1; do
    for ((l = 0; l < ll; l++)); do
      "$hosts" run "$h" env MASTER_ADDR="$addr0" MASTER_PORT=$port WORLD_SIZE=$((2 * ll)) \
        RANK=$((h * ll + l)) LOCAL_RANK=$l LOCAL_WORLD_SIZE=$ll GROUP_RANK=$h \
        RAYON_NUM_THREADS="$threads" GLOO_SOCKET_IFNAME="v${DDP_HOSTS_NAME}$h" \
        "$@" > "$prefix.$((h * ll + l)).log" 2>&1 &
      pids+=($!)
    done
  done
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  stop_samplers
  [[ $ok == 1 ]]
}

run_ddp() { # model out extra-set...
  local model=$1 out=$2; shift 2
  spec_for "$model" > "$work/$model.toml"
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  # Each rank its own folder (a run folder's files are rank 0's).
  launch "$out" sh -c 't=$0 spec=$1 dir=$2; shift 2; exec "$t" "$spec" --out "$dir/r$RANK" "$@"' \
    "$trainer" "$work/$model.toml" "$out" "${sets[@]}" || failed ddp "$out.0.log"
  measure "ddp:$out/r0" "$out.tx0" "$out.tx1"
}

run_torch() { # model out [torch_network.py flags...]
  local model=$1 out=$2 extra=()
  shift 2
  extra=("$@")
  [[ $model == gpt ]] && extra+=(--text "$text")
  # A failed reference run is a "failed" cell of the table (its log's end on stderr).
  if ! launch "$out" "$py" "$repo/bench/pytorch/torch_network.py" --model "$model" \
      --steps $((steps - warmup)) --warmup "$warmup" --threads "$threads" "${extra[@]}"; then
    echo "bench-network: a PyTorch rank failed ($*); the end of $out.0.log:" >&2
    tail -8 "$out.0.log" >&2
    echo "nan nan nan"
    return
  fi
  measure "torch:$out.0.log" "$out.tx0" "$out.tx1"
}

# A rank of a run failed: its log's end, then stop (the work folder is removed on exit).
failed() {
  echo "bench-network: a $1 rank failed; the end of $2:" >&2
  tail -20 "$2" >&2
  exit 1
}

# The fastest of some runs' "MEDIAN EXPOSED LINK_MB" lines.
best() { printf '%s\n' "$@" | sort -g | head -1; }

samplers=()
nan="nan nan nan"
for layout in $layouts; do
  [[ $layout == 1x1 || $layout =~ ^2x[2-9]$ ]] ||
    die "unknown layout $layout: 1x1 (one replica on each of the 2 hosts) or 2xL (L on each)"
done
for layout in $layouts; do
  reps=${layout#*x}
  for model in $models; do
    unit=samples; per=$((32 * 2 * reps))
    [[ $model == gpt ]] && { unit=tokens; per=$((8 * 128 * 2 * reps)); }
    echo
    if [[ $layout == 1x1 ]]; then
      echo "### $model, 2 hosts x 1 replica, $threads thread(s) each"
      echo
      echo "| link | ddp ($unit/s) | ddp auto | ddp not overlapped | ddp bf16 | ddp PowerSGD r4 | PyTorch DDP (gloo) | PyTorch bf16 hook | PyTorch PowerSGD r4 | ddp / PyTorch | ddp auto / PyTorch | ddp bf16 / PyTorch bf16 | ddp PowerSGD / PyTorch PowerSGD | ddp PowerSGD / ddp |"
      echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    else
      echo "### $model, 2 hosts x $reps replicas, $threads thread(s) each"
      echo
      echo "| link | ddp ($unit/s) | ddp auto | PyTorch DDP (gloo) | ddp / PyTorch | ddp auto / PyTorch |"
      echo "| --- | --- | --- | --- | --- | --- |"
    fi
    rows=()
    for rate in $rates; do
      "$hosts" rate "$rate"
      ov=(); au=(); no=(); bf=(); ps=(); pt=(); pb=(); pp=()
      for ((r = 0; r < rounds; r++)); do
        w=$work/$layout-$model-$rate-$r
        ov+=("$(run_ddp "$model" "$w-ov")")
        pt+=("$(run_torch "$model" "$w-pt")")
        au+=("$(run_ddp "$model" "$w-au" 'ddp.bucket_mb="auto"')")
        if [[ $layout == 1x1 ]]; then
          bf+=("$(run_ddp "$model" "$w-bf" 'ddp.compression="bf16"')")
          pb+=("$(run_torch "$model" "$w-pb" --hook bf16)")
          ps+=("$(run_ddp "$model" "$w-ps" 'ddp.compression="powersgd"' ddp.powersgd_rank=4)")
          pp+=("$(run_torch "$model" "$w-pp" --hook powersgd --powersgd-rank 4)")
          no+=("$(run_ddp "$model" "$w-no" ddp.overlap=false)")
        fi
        rm -rf "$w"-*/
      done
      out=$(python3 - "$layout" "$rate" "$per" "$(best "${ov[@]}")" "$(best "${au[@]}")" \
        "$(best "${no[@]:-$nan}")" "$(best "${bf[@]:-$nan}")" "$(best "${ps[@]:-$nan}")" \
        "$(best "${pt[@]}")" "$(best "${pb[@]:-$nan}")" "$(best "${pp[@]:-$nan}")" <<'EOF'
import sys
layout, rate, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
ov, au, no, bf, ps, pt, pb, pp = ([float(v) for v in a.split()] for a in sys.argv[4:12])
f = lambda r: "failed" if r[0] != r[0] else f"{per / r[0]:,.1f} ({r[0]:.3f} s/step)"
x = lambda a, b: "-" if a[0] != a[0] or b[0] != b[0] else f"{b[0] / a[0]:.2f}x"
ex = lambda r: "-" if r[1] != r[1] else f"{100 * r[1]:.0f} %"
mb = lambda r: "-" if r[2] != r[2] else f"{r[2]:.1f}"
if layout == "1x1":
    print(f"| {rate} | {f(ov)} | {f(au)} | {f(no)} | {f(bf)} | {f(ps)} | {f(pt)} | {f(pb)} | {f(pp)} | "
          f"{x(ov, pt)} | {x(au, pt)} | {x(bf, pb)} | {x(ps, pp)} | {x(ps, ov)} |")
    print(f"| {rate} | {ex(ov)} | {ex(au)} | {ex(bf)} | {ex(ps)} | {mb(ov)} | {mb(au)} | {mb(bf)} | "
          f"{mb(ps)} | {mb(pt)} | {mb(pb)} | {mb(pp)} |")
else:
    print(f"| {rate} | {f(ov)} | {f(au)} | {f(pt)} | {x(ov, pt)} | {x(au, pt)} |")
    print(f"| {rate} | {ex(ov)} | {ex(au)} | {mb(ov)} | {mb(au)} | {mb(pt)} |")
EOF
      )
      echo "${out%%$'\n'*}"
      rows+=("${out#*$'\n'}")
    done
    echo
    echo "Communication exposed (share of the communication time the step waited for) and MB on the link per step and direction:"
    echo
    if [[ $layout == 1x1 ]]; then
      echo "| link | exposed: ddp | ddp auto | ddp bf16 | ddp PowerSGD | link MB/step: ddp | ddp auto | ddp bf16 | ddp PowerSGD | PyTorch | PyTorch bf16 | PyTorch PowerSGD |"
      echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    else
      echo "| link | exposed: ddp | ddp auto | link MB/step: ddp | ddp auto | PyTorch |"
      echo "| --- | --- | --- | --- | --- | --- |"
    fi
    printf '%s\n' "${rows[@]}"
  done
done
