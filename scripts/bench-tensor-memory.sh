#!/usr/bin/env bash
# Peak resident memory of replicas training one epoch on memory-mapped tensor files: the same run
# on a generated 1 GiB and 8 GiB file. A replica maps the file instead of reading it and hands
# each sample's pages back once it is read, so its memory should not grow with the file
# (docs/data.md, "Tensor files", holds the figures).
#
#   scripts/bench-tensor-memory.sh [FORMAT] [GIB...]     (defaults: npz, 1 8; GIB may be a fraction)
#
# FORMAT is npz (np.savez's layout: stored x.npy / y.npy members, ZIP64 past 4 GiB) or
# safetensors. Each file holds x, float64 [N, 28, 28] (6,272 bytes a sample, so that an epoch over
# 8 GiB is 1.37 M samples: minutes of the MLP), and y, int64 [N] classes 0-9, written in a stream
# (never held in memory), in a folder with a small test part (test.FORMAT, 1,024 samples). The
# run: the FashionMNIST MLP (784-512-512-10), 2 replicas x 1 thread, batch 256 per replica, SGD,
# one epoch, no validation or checkpoints.
#
# With X=uint8, x is uint8 [N, 28, 28] (784 bytes a sample: 1 GiB holds as many samples as 8 GiB
# of float64), to tell memory that grows with the number of samples (the sampler's indices) from
# memory that would grow with the file's bytes.
#
# With SPARSE=1, x holds zeros left as a hole in the file (for a disk without GIB GiB free): the
# file's size, the page cache, the mapping and the reads are the same, only the disk is not written.
#
# Needs a trainer built with optimisations (cargo build --release -p ddp-trainer, or DDP_TRAINER=
# another, e.g. the test profile's target/debug/ddp-trainer) and GNU time. Writes GIB GiB under
# $TMPDIR (one file at a time, removed after its run; check `df -h` first, or use SPARSE=1).
# Prints, per file, the peak RSS of each replica (VmHWM, polled every 0.2 s), of the largest
# process (GNU time), and the run's time and samples/s.
set -euo pipefail
format=${1:-npz}
shift || true
sizes=("${@:-1 8}")
read -r -a sizes <<< "${sizes[*]}"
root=$(cd "$(dirname "$0")/.." && pwd)
trainer=${DDP_TRAINER:-$root/target/release/ddp-trainer}
[ -x "$trainer" ] || { echo "no trainer at $trainer: cargo build --release -p ddp-trainer" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 2; }
case $format in npz | safetensors) ;; *) echo "FORMAT is npz or safetensors" >&2; exit 2 ;; esac
x=${X:-float64}
case $x in float64) row=6272 ;; uint8) row=784 ;; *) echo "X is float64 or uint8" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# DIR/PART.FORMAT with N samples, x streamed in 64 MiB blocks of one random block of finite
# floats (with SPARSE=1: of zeros, skipped over, so that the file's x is a hole on the disk).
make_part() { # DIR PART N
    python3 - "$1" "$2" "$3" "$format" "${SPARSE:-0}" "$x" <<'PY'
import io, json, os, struct, sys, zipfile
d, part, n, fmt, sparse = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
size, st_dtype, descr = {"float64": (8, "F64", "<f8"), "uint8": (1, "U8", "|u1")}[sys.argv[6]]
row = 28 * 28 * size
if sparse:
    block = bytes(64 << 20)
else:
    block = bytearray(os.urandom(64 << 20))
    # Keep every float64 finite and below 2: the top byte holds the sign and 7 exponent bits.
    if size == 8:
        block[7::8] = bytes(block[7::8]).translate(bytes(b & 0x3F for b in range(256)))
labels = struct.pack("<%dq" % 1000, *[(i * 7) % 10 for i in range(1000)])

class Holes(io.RawIOBase):
    """A file that seeks over writes of the zero block instead of writing them."""
    def __init__(self, f):
        self.f, self.end = f, 0
    def write(self, b):
        if sparse and isinstance(b, memoryview) and b.obj is block:
            self.f.seek(len(b), 1)
        else:
            self.f.write(b)
        self.end = max(self.end, self.f.tell())
        return len(b)
    def seek(self, *args):
        return self.f.seek(*args)
    def tell(self):
        return self.f.tell()
    def seekable(self):
        return True
    def writable(self):
        return True
    def close(self):
        self.f.truncate(self.end)
        self.f.close()

def stream(f, nbytes, source):
    view = memoryview(source)
    while nbytes > 0:
        k = min(nbytes, len(source))
        f.write(view[:k])
        nbytes -= k

def npy_header(descr, shape):
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape))
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims)
    h += " " * (-(10 + len(h) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode()

out = Holes(open(os.path.join(d, "%s.%s" % (part, fmt)), "wb"))
if fmt == "safetensors":
    header = {"x": {"dtype": st_dtype, "shape": [n, 28, 28], "data_offsets": [0, n * row]},
              "y": {"dtype": "I64", "shape": [n], "data_offsets": [n * row, n * row + 8 * n]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    out.write(struct.pack("<Q", len(text)) + text)
    stream(out, n * row, block)
    stream(out, 8 * n, labels)
else:
    # As np.savez writes it: stored members opened with force_zip64=True.
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, descr, shape, nbytes, source in [
            ("x.npy", descr, (n, 28, 28), n * row, block),
            ("y.npy", "<i8", (n,), 8 * n, labels),
        ]:
            with z.open(name, "w", force_zip64=True) as f:
                f.write(npy_header(descr, shape))
                stream(f, nbytes, source)
out.close()
PY
}

run() { # DIR -> "peak_kib seconds rank0_kib rank1_kib"
    cat > "$1/spec.toml" <<SPEC
name = "tensor-memory"
[model]
name = "mlp"
[data]
name = "tensors"
path = "$1"
val_fraction = 0.0
[train]
epochs = 1
batch_size = 256
optimizer = "sgd"
lr = 0.01
log_every = 1000
[checkpoint]
every_epochs = 0
SPEC
    /usr/bin/time -f "%M %e" -o "$1/time.txt" \
        "$trainer" "$1/spec.toml" --standalone --nproc 2 --out "$1/run" > "$1/out.txt" 2>&1 &
    local timer=$! hwm0=0 hwm1=0
    while kill -0 "$timer" 2> /dev/null; do
        # time -> the launcher -> the replicas, each with RANK in its environment.
        for launcher in $(pgrep -P "$timer"); do
            for pid in $(pgrep -P "$launcher"); do
                # The process may be gone between the listing and the reads.
                rank=$({ tr '\0' '\n' < "/proc/$pid/environ"; } 2> /dev/null | sed -n 's/^RANK=//p') || true
                kib=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2> /dev/null) || true
                [ -n "$kib" ] || continue
                if [ "$rank" = 0 ] && [ "$kib" -gt "$hwm0" ]; then hwm0=$kib; fi
                if [ "$rank" = 1 ] && [ "$kib" -gt "$hwm1" ]; then hwm1=$kib; fi
            done
        done
        sleep 0.2
    done
    wait "$timer" || { cat "$1/out.txt" >&2; exit 1; }
    echo "$(cat "$1/time.txt") $hwm0 $hwm1"
}

echo "MLP 784-512-512-10 on $x [N, 28, 28] $format files$([ "${SPARSE:-0}" = 1 ] && echo " (x sparse)"), 2 replicas x 1 thread, batch 256, one epoch"
for gib in "${sizes[@]}"; do
    n=$(awk -v g="$gib" -v r="$row" 'BEGIN { printf "%d", g * 2^30 / (r + 8) }')
    d="$work/g$gib"
    mkdir -p "$d"
    t0=$SECONDS
    make_part "$d" train "$n"
    make_part "$d" test 1024
    wrote=$(( SECONDS - t0 ))
    bytes=$(stat -c %s "$d/train.$format")
    read -r kib secs r0 r1 < <(run "$d")
    printf '%s GiB (%d bytes, %d samples, written in %d s): peak RSS rank 0 %4d MiB, rank 1 %4d MiB, largest process %4d MiB; run %6.1f s (%.0f samples/s)\n' \
        "$gib" "$bytes" "$n" "$wrote" $(( r0 / 1024 )) $(( r1 / 1024 )) $(( kib / 1024 )) "$secs" \
        "$(awk -v n="$n" -v s="$secs" 'BEGIN { print n / s }')"
    rm -rf "$d"
done
