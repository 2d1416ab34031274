#!/bin/sh
# Installs the Debian packages PTC builds and tests with; does nothing when
# they are all present. Idempotent; needs root (or sudo) only when something
# is missing. CUDA and NCCL come from the CUDA toolkit and are optional.
set -eu
pkgs="cmake make gcc g++ pkg-config clang libclang-rt-14-dev
      liblmdb-dev libzstd-dev libxxhash-dev libjansson-dev libcmocka-dev
      libopenblas-dev libopenmpi-dev openmpi-bin libfuse3-dev fuse3 python3"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing:$missing" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo -n"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends $missing </dev/null
