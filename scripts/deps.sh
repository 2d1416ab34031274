#!/bin/sh
# Installs the Debian packages PTC builds and tests with, then the Python
# virtual environment of the `ptc` package's tests (.venv at the repo root,
# or $PTC_VENV): numpy, pytest, torch (CPU build), safetensors, transformers
# and the package's build backend. Does nothing when everything is present.
# Idempotent and non-interactive; needs root (or sudo) only when a Debian
# package is missing. PTC_PYTHON=0 skips the Python part.
# CUDA and NCCL come from the CUDA toolkit and are optional.
set -eu
pkgs="cmake make gcc g++ pkg-config clang libclang-rt-14-dev
      liblmdb-dev libzstd-dev libxxhash-dev libjansson-dev libcmocka-dev
      libopenblas-dev libopenmpi-dev openmpi-bin libfuse3-dev fuse3 iproute2 python3
      python3-venv"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "deps: installing:$missing" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends $missing </dev/null
fi

# ---- Python: the venv of python/ and tests/python/ ----------------------------
[ "${PTC_PYTHON:-1}" = 0 ] && exit 0
venv=${PTC_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}
# the CPU-only torch build lives on PyTorch's own package index; where that
# index cannot be reached, torch comes from the default one (it runs on the CPU
# too, with a larger download)
torch_index=${PTC_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
mods="numpy pytest torch safetensors transformers scikit_build_core"
have() {
    "$venv/bin/python" -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))" $mods 2>/dev/null
}
[ -x "$venv/bin/python" ] && have && exit 0
echo "deps: setting up the Python environment $venv" >&2
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip="$venv/bin/python -m pip install -q --no-input --disable-pip-version-check"
"$venv/bin/python" -c "import torch" 2>/dev/null ||
    $pip --retries 1 --timeout 20 --index-url "$torch_index" torch </dev/null ||
    $pip torch </dev/null
$pip numpy pytest safetensors transformers scikit-build-core </dev/null
have
