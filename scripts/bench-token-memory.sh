#!/usr/bin/env bash
# Peak resident memory of GPT replicas training on memory-mapped token files: the same run on a
# small train.bin and on a generated multi-GB one. A replica maps the file instead of reading it,
# so its memory should not grow with the file (docs/language-models.md, docs/performance.md).
#
#   scripts/bench-token-memory.sh [GIB] [STEPS]     (defaults: 4 GiB, 200 steps)
#
# Needs the release trainer (cargo build --release -p ddp-trainer; DDP_TRAINER names another) and
# GNU time. Writes GIB GiB plus 40 MiB under $TMPDIR (removed at the end). Prints, per file size,
# the peak RSS of the largest process (a replica; the launcher is smaller) and the run's time.
set -euo pipefail
gib=${1:-4}
steps=${2:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
trainer=${DDP_TRAINER:-$root/target/release/ddp-trainer}
[ -x "$trainer" ] || { echo "no trainer at $trainer: cargo build --release -p ddp-trainer" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Random little-endian u16 ids below 256 (a byte-level vocabulary): MIB MiB of train.bin and
# 64 KiB of val.bin.
make_data() { # DIR MIB
    mkdir -p "$1"
    python3 - "$1" "$2" <<'PY'
import os, sys
d, mib = sys.argv[1], int(sys.argv[2])
def write(path, nbytes):
    chunk = 1 << 24
    with open(path, "wb") as f:
        for start in range(0, nbytes, chunk):
            n = min(chunk, nbytes - start) // 2
            out = bytearray(2 * n)
            out[0::2] = os.urandom(n)
            f.write(out)
write(os.path.join(d, "train.bin"), mib << 20)
write(os.path.join(d, "val.bin"), 64 << 10)
PY
}

run() { # DIR -> "peak_kib seconds"
    cat > "$1/spec.toml" <<SPEC
name = "token-memory"
[model]
name = "gpt"
layers = 2
heads = 2
embd = 64
block = 64
[data]
name = "tokens"
path = "$1"
vocab_size = 256
[train]
steps = $steps
eval_every = $(( steps / 2 ))
batch_size = 12
optimizer = "adamw"
lr = 1e-3
[checkpoint]
every_steps = $steps
SPEC
    /usr/bin/time -f "%M %e" -o "$1/time.txt" \
        "$trainer" "$1/spec.toml" --standalone --nproc 2 --out "$1/run" > "$1/out.txt" 2>&1 ||
        { cat "$1/out.txt" >&2; exit 1; }
    cat "$1/time.txt"
}

echo "GPT (2 layers, embd 64, vocab 256), 2 replicas x 1 thread, $steps steps of 12 windows of 64 tokens"
for mib in 40 $(( gib * 1024 )); do
    make_data "$work/d$mib" "$mib"
    read -r kib secs < <(run "$work/d$mib")
    printf 'train.bin %6d MiB: peak RSS %5d MiB (largest process), %6.1f s\n' "$mib" $(( kib / 1024 )) "$secs"
    rm -rf "$work/d$mib"
done
