#!/usr/bin/env bash
# Image folders (docs/performance.md): the reference MNIST CNN on the 10,000-digit MNIST sample
# written as PNGs (scripts/make-image-folder.py, into a temporary folder), one process with T
# threads (default: all cores), batch 32, Adam, no validation split, no checkpoints:
#
#  (a) cache on: the training loop's samples/s (rank 0's train records, 3 epochs) on the PNG
#      folder with data.cache = "memory" against the same run on the IDX files, with the IDX
#      reader's normalisation (mean 0.5, std 0.5) so both train on the same numbers.
#      Target: PNG ≥ 90 % of IDX.
#  (b) cache cold: the wall time of a one-epoch ddp-trainer run on the PNG folder (process start
#      to exit: opening the folder, which decodes every image with the cache on, one epoch, the
#      test evaluation), with data.cache = "memory" and "none", against
#      scripts/torch-imagefolder.py (torchvision ImageFolder + DataLoader, the same CNN, clock
#      started after the imports) with num_workers 0, 1 and 2, the best of the three taken.
#      Target: PyTorch's time ≥ 1.25 × ours.
#
#   scripts/bench-image-folder.sh [ROUNDS]     (default 3; medians over the rounds)
#
# Needs the trainer (target/release/ddp-trainer; DDP_TRAINER names another), python3, and a
# Python with torch and torchvision for (b) (TORCH_PYTHON, default python3; THREADS sets T).
# The runs alternate within each round, so a busy machine slows both sides alike.
set -euo pipefail
rounds=${1:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
trainer=${DDP_TRAINER:-$root/target/release/ddp-trainer}
torch_py=${TORCH_PYTHON:-python3}
threads=${THREADS:-$(nproc)}
[ -x "$trainer" ] || { echo "no trainer at $trainer: cargo build --release -p ddp-trainer" >&2; exit 2; }
"$torch_py" -c "import torch, torchvision" 2>/dev/null \
    || { echo "$torch_py has no torch/torchvision: set TORCH_PYTHON" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$root/scripts/make-image-folder.py" "$work/pngs" >&2

spec() { # NAME EPOCHS DATA_KEYS...
    local name=$1 epochs=$2
    shift 2
    {
        printf 'name = "%s"\n[model]\nname = "mnist-cnn"\n[data]\n' "$name"
        printf '%s\n' "$@"
        printf 'val_fraction = 0.0\n[train]\nepochs = %s\nbatch_size = 32\n' "$epochs"
        printf 'optimizer = "adam"\nlr = 0.001\nscheduler = { kind = "step", step_size = 1, gamma = 0.7 }\n'
        printf 'seed = 1\n[ddp]\nreplicas = 1\nthreads = %s\n[checkpoint]\nevery_epochs = 0\n' "$threads"
    } > "$work/$name.toml"
}
idx_keys=('name = "mnist"' "path = \"$root/examples/data/mnist-sample\"")
png_keys=('name = "image-folder"' "path = \"$work/pngs\"" 'mean = [0.5]' 'std = [0.5]')
spec idx 3 "${idx_keys[@]}"
spec png 3 "${png_keys[@]}" 'cache = "memory"'
spec cold-memory 1 "${png_keys[@]}" 'cache = "memory"'
spec cold-none 1 "${png_keys[@]}" 'cache = "none"'

# Trains SPEC into a fresh run folder; prints the wall time in seconds.
run() {
    rm -rf "$work/out-$1"
    local t0 t1
    t0=$(date +%s.%N)
    "$trainer" "$work/$1.toml" --out "$work/out-$1" > "$work/$1.log" 2>&1 \
        || { cat "$work/$1.log" >&2; exit 1; }
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.3f}')"
}

# The training loop's samples/s of a run: rank 0's train records.
rate() {
    python3 - "$work/out-$1/metrics/rank-0.jsonl" <<'PY'
import json, sys
n = t = 0.0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["kind"] == "train":
        n += r["samples"]; t += r["samples"] / r["samples_per_sec"]
print(f"{n / t:.1f}")
PY
}

results=$work/results
: > "$results"
for r in $(seq "$rounds"); do
    echo "round $r/$rounds" >&2
    run idx > /dev/null; echo "idx_rate $(rate idx)" >> "$results"
    run png > /dev/null; echo "png_rate $(rate png)" >> "$results"
    echo "cold_memory $(run cold-memory)" >> "$results"
    echo "cold_none $(run cold-none)" >> "$results"
    for w in 0 1 2; do
        t=$("$torch_py" "$root/scripts/torch-imagefolder.py" "$work/pngs" --workers "$w" \
            --threads "$threads" | python3 -c "import json, sys; print(json.load(sys.stdin)['first_epoch_s'])")
        echo "torch_w$w $t" >> "$results"
    done
done

python3 - "$results" "$rounds" "$threads" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    rows.setdefault(k, []).append(float(v))
med = {k: statistics.median(v) for k, v in rows.items()}
span = lambda k: f"{min(rows[k]):g}–{max(rows[k]):g}"
print(f"image folder benchmark: MNIST sample as 10,000 PNGs, mnist-cnn, 1 process x {sys.argv[3]} threads, "
      f"median of {sys.argv[2]} rounds (range)")
print(f"(a) training samples/s, cache on: PNG {med['png_rate']:.0f} ({span('png_rate')}), "
      f"IDX {med['idx_rate']:.0f} ({span('idx_rate')}): {100 * med['png_rate'] / med['idx_rate']:.1f} % (target >= 90 %)")
best = min(("torch_w0", "torch_w1", "torch_w2"), key=lambda k: med[k])
for k in ("cold_memory", "cold_none", "torch_w0", "torch_w1", "torch_w2"):
    print(f"    first epoch {k:12s} {med[k]:8.2f} s ({span(k)})")
ours = min(med["cold_memory"], med["cold_none"])
print(f"(b) first epoch, cache cold: ddp {ours:.2f} s (cache = "
      f"{'memory' if med['cold_memory'] <= med['cold_none'] else 'none'}), PyTorch best "
      f"{med[best]:.2f} s (num_workers {best[-1]}): {med[best] / ours:.2f}x (target >= 1.25x)")
PY
