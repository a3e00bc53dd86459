#!/usr/bin/env bash
# CUDA 13.0 build environment from PyPI wheels (no system CUDA needed), for
#   cargo build --release -p ddp-trainer --features cuda
#
#   source scripts/cuda-env.sh            # install on first use, then export the env
#   bash scripts/cuda-env.sh --install    # only install / check the venv
#
# The venv lives at ${DDP_CUDA_VENV:-<repo>/.venv-cuda}; its cuda/ folder is a
# toolkit-shaped root (bin, nvvm, include, lib, lib/stubs) made of symlinks into
# site-packages/nvidia, plus a generated link-time stub for libcuda.so (no wheel
# ships the driver stub). The target GPU machine runs driver 580 (CUDA 13.0), so
# every pin below is CUDA 13.0 Update 2 (the set of PyPI's cuda-toolkit==13.0.2);
# NCCL 2.30 matches cudarc 0.19's `nccl` bindings (nccl-02030).
# CUDA_COMPUTE_CAP defaults to 90 (H100/H200); export another value before sourcing to change it.

_ddp_cuda_pins=(
  nvidia-cuda-nvcc==13.0.88      # nvcc, ptxas, fatbinary
  nvidia-nvvm==13.0.88           # cicc, libdevice (nvcc needs it)
  nvidia-cuda-crt==13.0.88       # include/crt/*
  nvidia-cuda-runtime==13.0.96   # cuda.h, cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, libcudart.so.13
  nvidia-cuda-cccl==13.0.85      # include/cccl (nv/target, cuda/std) used by the fp16/bf16 headers
  nvidia-cublas==13.1.0.3        # libcublas.so.13, libcublasLt.so.13
  nvidia-curand==10.4.0.35       # libcurand.so.10
  nvidia-cuda-nvrtc==13.0.88     # libnvrtc.so.13
  nvidia-nccl-cu13==2.30.7       # libnccl.so.2, nccl.h
)

_ddp_cuda_die() { echo "cuda-env: error: $*" >&2; return 1; }

# Creates the venv, installs the pins and builds <venv>/cuda; skipped when the stamp matches.
# The stamp is this script's checksum: editing the pins or the layout below re-runs it.
_ddp_cuda_install() {
  local venv=$1 root=$1/cuda stamp=$1/.ddp-cuda-stamp want site cu nccl f base
  want=$(cksum <"${BASH_SOURCE[0]}") || return 1
  if [[ -f $stamp && "$(cat "$stamp")" == "$want" && -x $root/bin/nvcc ]]; then
    return 0
  fi
  local py=${PYTHON:-python3}
  command -v "$py" >/dev/null || { _ddp_cuda_die "$py not found (set PYTHON)"; return 1; }
  command -v cc >/dev/null || { _ddp_cuda_die "cc not found (needed to build the libcuda stub)"; return 1; }
  echo "cuda-env: installing CUDA 13.0 wheels into $venv" >&2
  [[ -x $venv/bin/python ]] || "$py" -m venv "$venv" || { _ddp_cuda_die "could not create venv $venv"; return 1; }
  # --no-deps: the list above is complete, so nothing unpinned comes in.
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps "${_ddp_cuda_pins[@]}" \
    || { _ddp_cuda_die "pip install failed"; return 1; }

  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
  cu=$site/nvidia/cu13 nccl=$site/nvidia/nccl
  [[ -x $cu/bin/nvcc && -f $cu/include/cuda.h && -f $nccl/include/nccl.h ]] \
    || { _ddp_cuda_die "unexpected wheel layout under $site/nvidia"; return 1; }

  # Toolkit-shaped root: bin/ and nvvm/ as-is, merged include/ and lib/.
  rm -rf "$root" && mkdir -p "$root/include" "$root/lib/stubs" || return 1
  ln -s "$cu/bin" "$root/bin" && ln -s "$cu/nvvm" "$root/nvvm" || return 1
  ln -s "$cu/include/"* "$nccl/include/"* "$root/include/" || return 1
  # Each versioned library plus its unversioned link-time name (libcublas.so -> libcublas.so.13).
  for f in "$cu"/lib/*.so.* "$nccl"/lib/*.so.*; do
    base=$(basename "$f")
    ln -sf "$f" "$root/lib/$base"
    ln -sf "$base" "$root/lib/${base%%.so.*}.so"
  done
  ln -s "$cu"/lib/*.a "$root/lib/" || return 1   # libcudart_static.a, libcudadevrt.a (nvcc's default link)
  # libcuda.so comes with the driver, and no wheel ships NVIDIA's stub. Generate one the same
  # way: every cu* name in cuda.h returns CUDA_ERROR_STUB_LIBRARY (34); SONAME libcuda.so.1 so the
  # binary loads the driver's real library at run time. It lives in lib/stubs, never on LD_LIBRARY_PATH.
  grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\b' "$cu/include/cuda.h" | sort -u \
    | awk '{ printf "int %s(void) { return 34; }\n", $1 }' >"$root/lib/stubs/libcuda-stub.c" || return 1
  cc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so" "$root/lib/stubs/libcuda-stub.c" \
    || { _ddp_cuda_die "building the libcuda stub failed"; return 1; }

  "$root/bin/nvcc" --version | grep -q 'release 13\.0' || { _ddp_cuda_die "nvcc is not CUDA 13.0"; return 1; }
  echo "$want" >"$stamp"
}

# PATH-like prepend without duplicates.
_ddp_cuda_prepend() {
  local cur=${!1:-}
  case ":$cur:" in *":$2:"*) ;; *) export "$1=$2${cur:+:$cur}" ;; esac
}

_ddp_cuda_main() {
  local repo venv root
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 1
  venv=${DDP_CUDA_VENV:-$repo/.venv-cuda}
  root=$venv/cuda
  _ddp_cuda_install "$venv" || return 1
  _ddp_cuda_prepend PATH "$root/bin"                   # nvcc (cudarc reads the CUDA version from it; candle-kernels compiles with it)
  # cudarc links against <root>/lib and <root>/lib/stubs of each of these that is set, so all
  # three point here (an inherited CUDA_PATH to another toolkit would otherwise join the search).
  export CUDA_HOME=$root CUDA_PATH=$root CUDA_ROOT=$root
  export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}      # no nvidia-smi here: candle-kernels/cudaforge need it explicitly
  _ddp_cuda_prepend LIBRARY_PATH "$root/lib/stubs"     # link time: libcuda stub ...
  _ddp_cuda_prepend LIBRARY_PATH "$root/lib"           # ... and the real toolkit/NCCL libraries
  _ddp_cuda_prepend LD_LIBRARY_PATH "$root/lib"        # run time (libcuda.so.1 itself must come from the driver)
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  _ddp_cuda_main
else
  set -euo pipefail
  case "${1:-}" in
    --install) _ddp_cuda_main; echo "cuda-env: ready: $(nvcc --version | tail -n 2 | head -n 1)" ;;
    *) echo "usage: source ${0} | bash ${0} --install" >&2; exit 2 ;;
  esac
fi
