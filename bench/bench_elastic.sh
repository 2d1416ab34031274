#!/bin/bash
# Downtime of one reconfiguration of the same job (the demo MLP, tp=2, pp=2,
# 1F1B) three ways, printed as one table:
#   online    ptc train --resize: the state moves in memory (plan + move +
#             rebuild, as ptc train reports them), dp=1 -> dp=2 and back;
#   restart   ptc elastic, the slots file going 4 -> 8: stop at a step
#             boundary, save, relaunch under dp=2 with --resume (detect +
#             save + plan + load + restart, as ptc elastic logs them);
#   failure   ptc elastic, kill -9 of a rank of dp=2 (8 slots): restart from
#             the newest version on the 7 left, under dp=1;
#   elastic --online  ptc elastic --online, the slots file going 8 -> 4 -> 8:
#             the controller resizes the running job in memory both ways
#             (detect + plan + move + rebuild, as it logs them).
# The ratio restart/online compares the same change (dp=1 -> dp=2); the goal
# is >= 5. Usage: bench/bench_elastic.sh [BUILD_DIR] (default build).
set -eu
B=${1:-build}
PTC=$(cd "$B" && pwd)/ptc
# mpi_yield_when_idle: the controller's hostfile gives mpirun more slots than
# this machine has cores, so Open MPI would busy-wait in every blocking call
# (it yields only where it sees the node oversubscribed); processes spinning
# on 2 cores slow every path, the in-memory resize's collectives most.
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
MPIRUN=(mpirun --bind-to none --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
M=${BENCH_MODEL:-mlp:layers=8,hidden=128,vocab=256,tokens=16}
T=(--schedule 1f1b --microbatches 4 --model "$M" --seed 1 --data synthetic)
wait_for() { for _ in $(seq 600); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done; return 1; }

# ---- online ----------------------------------------------------------------------------
"${MPIRUN[@]}" -np 8 "$PTC" train --config dp=1,tp=2,pp=2 "${T[@]}" --steps 9 \
    --resize 3:dp=2,tp=2,pp=2,6:dp=1,tp=2,pp=2 > "$TMP/on.out"
online() { # FROM TO -> ms
    grep "^resize at step .*: $1 -> $2, " "$TMP/on.out" |
        sed -E 's/.*plan ([0-9.]+) ms, move ([0-9.]+) ms, rebuild ([0-9.]+) ms.*/\1 \2 \3/'
}
read -r op1 om1 ob1 <<< "$(online dp=1,tp=2,pp=2 dp=2,tp=2,pp=2)"
read -r op2 om2 ob2 <<< "$(online dp=2,tp=2,pp=2 dp=1,tp=2,pp=2)"

# ---- restart (scale-out through ptc elastic) ------------------------------------------------
mkdir "$TMP/st1"
echo 4 > "$TMP/slots"
"$PTC" elastic --store "$TMP/st1" --slots "$TMP/slots" --tp 2 --pp 2 --json -- ptc train "${T[@]}" \
    --steps 8 --save-every 100 --jitter 20 > "$TMP/re.json" 2> "$TMP/re.err" &
pid=$!
wait_for "$TMP/re.err" '^step 2 '
echo 8 > "$TMP/slots"
wait $pid

# ---- failure (kill -9 through ptc elastic) -----------------------------------------------------
mkdir "$TMP/st2"
"$PTC" elastic --store "$TMP/st2" --slots 8 --tp 2 --pp 2 --json -- ptc train "${T[@]}" \
    --steps 8 --save-every 2 --jitter 20 > "$TMP/fa.json" 2> "$TMP/fa.err" &
pid=$!
wait_for "$TMP/fa.err" '^step 3 '
mp=$(pgrep -P $pid mpirun)
kill -9 "$(pgrep -P "$mp" | head -n 1)"
wait $pid

# ---- online through the controller (--online, slots 8 -> 4 -> 8) -------------------------------
mkdir "$TMP/st3"
echo 8 > "$TMP/slots3"
"$PTC" elastic --store "$TMP/st3" --slots "$TMP/slots3" --tp 2 --pp 2 --online --json -- ptc train \
    "${T[@]}" --steps 10 --save-every 100 --jitter 20 > "$TMP/on.json" 2> "$TMP/on.err" &
pid=$!
wait_for "$TMP/on.err" '^step 2 '
echo 4 > "$TMP/slots3"
wait_for "$TMP/on.json" '"scale-in"'
wait_for "$TMP/on.err" '^step 6 '
echo 8 > "$TMP/slots3"
wait $pid

python3 - "$TMP/re.json" "$TMP/fa.json" "$op1" "$om1" "$ob1" "$op2" "$om2" "$ob2" "$M" "$TMP/on.json" <<'PY'
import json, sys
def reconf(path):
    ev = [json.loads(l) for l in open(path)]
    r = [e for e in ev if e["event"] == "reconfigure"]
    assert len(r) == 1, ev
    return r[0]
re, fa = reconf(sys.argv[1]), reconf(sys.argv[2])
o1 = [float(x) / 1e3 for x in sys.argv[3:6]]
o2 = [float(x) / 1e3 for x in sys.argv[6:9]]
print(f"model {sys.argv[9]}, tp=2, pp=2, 1f1b; seconds")
print(f"{'path':<36}{'change':<12}{'downtime':>9}  parts")
print(f"{'online resize (ptc train --resize)':<36}{'dp 1 -> 2':<12}{sum(o1):>9.4f}  "
      f"plan {o1[0]:.4f} move {o1[1]:.4f} rebuild {o1[2]:.4f}")
print(f"{'online resize (ptc train --resize)':<36}{'dp 2 -> 1':<12}{sum(o2):>9.4f}  "
      f"plan {o2[0]:.4f} move {o2[1]:.4f} rebuild {o2[2]:.4f}")
for name, r in (("save and restart (ptc elastic)", re), ("failure recovery (ptc elastic)", fa)):
    ch = "dp %s -> %s" % (r["from"].split(",")[0][3:], r["to"].split(",")[0][3:])
    print(f"{name:<36}{ch:<12}{r['downtime_s']:>9.4f}  detect {r['detect_s']:.4f} save "
          f"{r['save_s']:.4f} plan {r['plan_s']:.4f} load {r['load_s']:.4f} restart "
          f"{r['restart_s']:.4f}; {r['steps_lost']} steps lost")
ev = [json.loads(l) for l in open(sys.argv[10])]
on = {e["reason"]: e for e in ev if e["event"] == "reconfigure"}
assert set(on) == {"scale-in", "scale-out"} and all(e["path"] == "online" for e in on.values()), ev
for reason in ("scale-out", "scale-in"):
    r = on[reason]
    ch = "dp %s -> %s" % (r["from"].split(",")[0][3:], r["to"].split(",")[0][3:])
    print(f"{'online (ptc elastic --online)':<36}{ch:<12}{r['downtime_s']:>9.4f}  detect "
          f"{r['detect_s']:.4f} plan {r['plan_s']:.4f} move {r['move_s']:.4f} rebuild "
          f"{r['restart_s']:.4f}")
print(f"ratio restart/online (dp 1 -> 2): {re['downtime_s'] / sum(o1):.1f} (goal >= 5)")
print(f"ratio failure/online (dp 2 -> 1): {fa['downtime_s'] / sum(o2):.1f}")
print(f"ratio restart/elastic --online (dp 1 -> 2): "
      f"{re['downtime_s'] / on['scale-out']['downtime_s']:.1f}")
PY
