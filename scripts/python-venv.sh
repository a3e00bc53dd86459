#!/usr/bin/env bash
# The Python environment of the kernel's Jupyter tests (kernel/tests/jupyter.rs runs the scripts in
# kernel/tests/python/ with it): a venv with real Jupyter clients, JupyterLab and Selenium, pinned
# in scripts/test-requirements.txt.
#
#   scripts/python-venv.sh        # creates or updates <repo>/.venv-test, prints its python
#   DDP_TEST_PYTHON=$(scripts/python-venv.sh) cargo test -p ddp-kernel --test jupyter
#
# Only the python path goes to stdout; progress and errors go to stderr. When the venv's stamp
# (the requirements file + the python version) matches, nothing is installed and it returns at once.
# ${DDP_TEST_VENV:-<repo>/.venv-test} is the venv (ignored by git: /.venv*); $PYTHON (default
# python3; 3.11 or newer, which the pins need) creates it. On Debian without the venv module,
# python3-venv is installed with apt-get (as scripts/test.sh does for tmux).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${DDP_TEST_VENV:-$repo/.venv-test}
py=${PYTHON:-python3}
vpy=$venv/bin/python

die() { echo "python-venv: error: $*" >&2; exit 1; }
say() { echo "python-venv: $*" >&2; }

requirements=$repo/scripts/test-requirements.txt
[[ -f $requirements ]] || die "$requirements is missing"
# Fast path: the stamp says this venv has exactly these pins for this python.
stamp_of() { printf '%s\n' "$1"; grep -v '^#' "$requirements"; }
if [[ -x $vpy && -f $venv/.ddp-test-stamp ]]; then
  if [[ "$(cat "$venv/.ddp-test-stamp")" == "$(stamp_of "$("$vpy" -V 2>&1)")" ]]; then
    echo "$vpy"
    exit 0
  fi
fi

if ! command -v "$py" >/dev/null 2>&1 || ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    say "installing python3 and python3-venv (apt-get)"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq python3 python3-venv >&2 \
      || die "apt-get could not install python3-venv"
  fi
  command -v "$py" >/dev/null 2>&1 || die "$py not found (install Python 3.11+ or set PYTHON)"
  "$py" -c 'import venv, ensurepip' >/dev/null 2>&1 \
    || die "$py has no venv/ensurepip module (Debian/Ubuntu: apt-get install python3-venv)"
fi
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$py is $("$py" -V 2>&1); Python 3.11 or newer is needed (set PYTHON)"

if [[ ! -x $vpy ]] || ! "$vpy" -c 'import sys' >/dev/null 2>&1; then
  say "creating $venv"
  rm -rf "$venv"
  "$py" -m venv "$venv" >&2 || die "could not create the venv $venv"
fi
say "installing the Jupyter test clients into $venv"
rm -f "$venv/.ddp-test-stamp"
# Not --no-deps: if a python version needs one more dependency, pip brings it instead of failing.
"$vpy" -m pip install --disable-pip-version-check -q -r "$requirements" >&2 || die "pip install -r $requirements failed"
check=$("$vpy" -m pip check 2>&1) || die "pip check failed: $check"
"$vpy" -c 'import jupyter_client, jupyter_kernel_test, nbclient, nbformat, jsonschema, jupyterlab, selenium' \
  || die "the installed packages do not import"
stamp_of "$("$vpy" -V 2>&1)" >"$venv/.ddp-test-stamp"
echo "$vpy"
