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

# mpirun_each NP CMD...: mpirun -np NP CMD, where no process exits before
# every process has finished CMD (a barrier, at most 120 s). mpirun kills
# the others as soon as one exits non-zero, maybe before they print (a
# loaded machine starts them far apart): the checks of what each process
# says when all of them fail need every process to get there.
cat > "$TMP/each.sh" <<'EOF'
#!/bin/sh
d=$1
shift
"$@"
rc=$?
: > "$d/done.$OMPI_COMM_WORLD_RANK"
i=0
while [ "$(ls "$d" | wc -l)" -lt "$OMPI_COMM_WORLD_SIZE" ] && [ $i -lt 1200 ]; do
    sleep 0.1
    i=$((i + 1))
done
exit $rc
EOF
mpirun_each() {
    local np=$1 d
    shift
    d=$(mktemp -d -p "$TMP" each.XXXXXX)
    "${MPIRUN[@]}" -np "$np" sh "$TMP/each.sh" "$d" "$@"
}
# The final parameters of a `ptc train --store S --save-every 0` run as one
# safetensors file (global names, F32, no optimizer state): export_params S FILE
export_params() { "$PTC" export --store "$1" --out "$2" --params-only > /dev/null || fail "export of $1"; }
