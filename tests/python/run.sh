#!/usr/bin/env bash
# The Python package's tests: installs python/ into the virtual environment
# of `make deps` (bundling the libptc.so this build made, PTC_LIBRARY) and
# runs tests/python with pytest against the installed package. Exit 77
# (skipped) when there is no environment. Extra arguments go to pytest.
#   run.sh --install          install only (ctest python.install, the setup
#                             of the fixture every python.* test requires)
#   run.sh --installed ARGS   pytest only, on what python.install installed
#                             (ctest python.<file>: one test file each)
#   run.sh ARGS               both (by hand)
set -euo pipefail
src=${PTC_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
venv=${PTC_VENV:-$src/.venv}
py=$venv/bin/python
if [ ! -x "$py" ]; then
    echo "no Python environment at $venv (make deps sets it up)"
    exit 77
fi
mode=both
case "${1:-}" in
    --install) mode=install; shift ;;
    --installed) mode=test; shift ;;
esac
if [ $mode != test ]; then
    lib=${PTC_LIBRARY:-$src/build/libptc.so}
    "$py" -m pip install -q --no-input --disable-pip-version-check --no-build-isolation --no-deps \
        --force-reinstall -C cmake.define.PTC_LIBRARY="$lib" "$src/python" </dev/null
    [ $mode = both ] || exit 0
fi
cd "$src/tests/python"
unset PTC_LIB
export PTC_EXPECT_BUNDLED=1
exec "$py" -m pytest -p no:cacheprovider -ra "$@"
