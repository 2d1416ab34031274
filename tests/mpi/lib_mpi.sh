# Shared helpers of the MPI tests (sourced).
set -eu
: "${PTC:?PTC must name the ptc binary}"
# yield when idle: ptc elastic's hostfiles give mpirun more slots than the
# machine has cores, where Open MPI would otherwise busy-wait
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# The final parameters of a `ptc train --store S --save-every 0` run as one
# safetensors file (global names, F32, no optimizer state): export_params S FILE
export_params() { "$PTC" export --store "$1" --out "$2" --params-only > /dev/null || fail "export of $1"; }
