#!/usr/bin/env bash
# GPU check for a `--features cuda` build of ddp-trainer, to run on a machine with one or more
# NVIDIA GPUs (no Rust needed there: build with scripts/cuda-env.sh, carry the binary).
#
#   scripts/gpu-check.sh path/to/ddp-trainer OUT_DIR
#
# 1. world 1, backend auto (= nccl): the NCCL communicator, the device step, mnist-cnn 1 epoch;
# 2. world 2 on GPU 0 twice, backend tcp: the device step with the host all-reduce;
# 3. equivalence on the GPU: 2 replicas x batch 8 == 1 replica x batch 16 (weights compared
#    with PyTorch's safetensors loader);
# 4. world 2, backend nccl: on 2+ GPUs a real NCCL all-reduce (devices [0, 1]); on one GPU NCCL
#    refuses two ranks on one device, and the run must fail with a message, not hang.
# Every run's output is kept under OUT_DIR; the last lines summarise.
set -uo pipefail

TRAINER=${1:?usage: gpu-check.sh path/to/ddp-trainer OUT_DIR}
OUT=${2:?usage: gpu-check.sh path/to/ddp-trainer OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

# CUDA runtime libraries from the Python wheels of the machine's PyTorch, if any.
PY=$(command -v python3 || true)
if [ -n "$PY" ]; then
    NV=$("$PY" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
    if [ -n "$NV" ]; then
        for d in "$NV"/nvidia/*/lib "$NV"/nvidia/cu*/lib; do
            [ -d "$d" ] && LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
        done
        export LD_LIBRARY_PATH
    fi
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
GPUS=$(nvidia-smi -L | wc -l)
echo "ldd:"; ldd "$TRAINER" | grep -E "cuda|cublas|curand|nvrtc|nccl" | tee "$OUT/ldd.txt"

declare -a SUMMARY
run() { # name, expected exit (0 or "fail"), args...
    local name=$1 want=$2; shift 2
    local start=$SECONDS
    timeout 600 "$TRAINER" "$@" >"$OUT/$name.log" 2>&1
    local rc=$? secs=$((SECONDS - start))
    local ok=no
    if [ "$want" = 0 ] && [ $rc = 0 ]; then ok=yes; fi
    if [ "$want" = fail ] && [ $rc != 0 ] && [ $rc != 124 ]; then ok=yes; fi
    SUMMARY+=("$name: exit $rc in ${secs}s, as expected: $ok")
    tail -n 4 "$OUT/$name.log"
}

COMMON=(--set data.path=examples/data/mnist-sample --set train.epochs=1)
run w1-nccl 0 examples/mnist.toml --out "$OUT/w1-nccl" "${COMMON[@]}" \
    --set ddp.replicas=1 --set "ddp.devices=[0]"
run w2-tcp-one-gpu 0 examples/mnist.toml --standalone --nproc 2 --out "$OUT/w2-tcp" "${COMMON[@]}" \
    --set "ddp.devices=[0, 0]" --set ddp.backend=tcp

EQ=(--set data.val_fraction=0.0 --set data.limit_train=512 --set train.max_steps=6 \
    --set checkpoint.every_epochs=0 --set train.optimizer=sgd --set train.lr=0.01 \
    --set train.lr_scaling=none)
run eq-two 0 examples/mnist.toml --standalone --nproc 2 --out "$OUT/eq-two" "${COMMON[@]}" "${EQ[@]}" \
    --set train.batch_size=8 --set "ddp.devices=[0, 0]" --set ddp.backend=tcp
run eq-one 0 examples/mnist.toml --standalone --nproc 1 --out "$OUT/eq-one" "${COMMON[@]}" "${EQ[@]}" \
    --set train.batch_size=16 --set "ddp.devices=[0]"
if [ -n "$PY" ]; then
    "$PY" - "$OUT/eq-two/model.safetensors" "$OUT/eq-one/model.safetensors" <<'EOF' | tee "$OUT/equivalence.txt"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
worst = max((a[k] - b[k]).abs().max().item() for k in a)
print(f"equivalence on GPU: max |2x8 - 1x16| = {worst:.3g} ({'ok' if worst < 1e-4 else 'TOO LARGE'})")
EOF
fi

if [ "$GPUS" -ge 2 ]; then
    run w2-nccl 0 examples/mnist.toml --standalone --nproc 2 --out "$OUT/w2-nccl" "${COMMON[@]}" \
        --set "ddp.devices=[0, 1]" --set ddp.backend=nccl
else
    run w2-nccl-one-gpu fail examples/mnist.toml --standalone --nproc 2 --out "$OUT/w2-nccl" \
        "${COMMON[@]}" --set "ddp.devices=[0, 0]" --set ddp.backend=nccl --set ddp.timeout_s=60
fi

echo; echo "== summary ($GPUS GPU(s))"
printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
