#!/bin/sh
# The cost model of `ptc suggest` against measured runs of `ptc train` on
# this machine (docs/search.md, "Model against reality").
#
#   sh scripts/check-suggest-model.sh [BUILD_DIR] [fake|real|memory|all]
#
# 1. Calibrates the link between two processes (MPI over shared memory):
#    alpha from a 2-stage run with no compute and 32-byte messages, beta
#    from the same run with 16 MiB messages (two messages on the critical
#    path each). With real compute it also calibrates the achievable FLOP/s
#    of one process (OpenBLAS, one thread): one single-process run of the
#    demo model, FLOP/s = the model's FLOPs per step / measured step time.
# 2. Asks `ptc suggest --model mlp:... --exhaustive --json` for the
#    prediction of every configuration, with the calibrated figures.
# 3. Runs each configuration under mpirun and compares the median step
#    time (steps after the first) with the prediction.
# Fake compute: every F/B/W sleeps the stage costs the model predicts for
# an emulated device (--tflops 0.02), so the check covers the schedule,
# the bubble, the p2p transfers and the runtime's overheads; fake compute
# reduces no gradients, so the prediction's dp term is left out for it.
# Real compute covers the FLOP-derived compute and the gradient all-reduce
# too (at most 2 processes: the machine has 2 cores).
# 4. Runs search_memory (tests/mpi/search_memory.c) under mpirun (pp = 2
#    and 4): the predicted activation bytes against the demo model's own
#    count of the blocks it holds (equal for every schedule).
# Each figure is the median step of a run, the least of 3 runs (other work
# on a shared machine only slows runs down).
# Prints a table and "N of M within 15%"; exits 1 if fewer than 10 are.
set -eu
BUILD=${1:-build}
WHAT=${2:-all}
PTC=$BUILD/ptc
[ -x "$PTC" ] || { echo "no $PTC: build first" >&2; exit 1; }
MPI="mpirun --oversubscribe"
[ "$(id -u)" -eq 0 ] && MPI="$MPI --allow-run-as-root"
export OPENBLAS_NUM_THREADS=1 PTC MPI WHAT BUILD
exec python3 - <<'EOF'
import json, os, shlex, subprocess, sys

PTC, MPI, WHAT = os.environ["PTC"], os.environ["MPI"], os.environ["WHAT"]
MODEL = "mlp:layers=8,hidden=256,vocab=64,tokens=64"
ACT = 64 * 256 * 4          # bytes of a boundary activation of MODEL
FAKE_TFLOPS = 0.02          # the emulated device of the fake-compute runs

def train(np_, args, steps, repeats=3):
    """Median step time of a run (steps after the first); the least of
    `repeats` runs, as other work on the machine only ever slows a run."""
    best = None
    for _ in range(repeats):
        cmd = shlex.split(MPI) + ["-np", str(np_), PTC, "train", "--steps", str(steps),
                                  "--json"] + args
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        d = json.loads(out.strip().splitlines()[-1])
        ms = sorted(s["step_ms"] for s in d["steps"][1:])
        med = ms[len(ms) // 2] / 1e3
        best = med if best is None else min(best, med)
    return best

def suggest(gpus, batch, tflops, lat, bw):
    cmd = [PTC, "suggest", "--model", MODEL, "--gpus", str(gpus), "--gpus-per-host",
           str(gpus), "--tflops", repr(tflops), "--intra-lat", repr(lat * 1e6),
           "--intra-bw", repr(bw / 1e9), "--global-batch", str(batch), "--exhaustive",
           "--top", "65536", "--json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

def find(js, dp, pp, kind, M, V, k):
    for c in js["configs"]:
        if (c["dp"], c["tp"], c["pp"], c["zero"], c["schedule"], c["microbatches"],
                c["mb_size"]) == (dp, 1, pp, 0, kind, M, 1) and \
                (kind != "interleaved" or c["chunks"] == V) and (kind != "kfkb" or c["k"] == k):
            return c
    raise SystemExit(f"no prediction for dp={dp} pp={pp} {kind} M={M}")

# ---- calibration -------------------------------------------------------------------
zero = ["--config", "pp=2", "--schedule", "gpipe", "--microbatches", "1", "--fake-compute",
        "--cost-f", "0", "--cost-b", "0"]
t_small = train(2, zero + ["--act-bytes", "32"], 41)
t_big = train(2, zero + ["--act-bytes", str(16 << 20)], 21)
alpha = t_small / 2
beta = 2 * (16 << 20) / max(t_big - t_small, 1e-9)
print(f"calibration: alpha {alpha * 1e6:.2f} us, beta {beta / 1e9:.2f} GB/s "
      f"(2-stage round trips of 32 B: {t_small * 1e6:.1f} us, 16 MiB: {t_big * 1e3:.2f} ms)")

rows = []
print("load average at the start:", open("/proc/loadavg").read().split()[:3])

def run_case(mode, dp, pp, kind, M, V=1, k=0, tflops=None):
    js = suggest(dp * pp, dp * M, tflops, alpha, beta)
    c = find(js, dp, pp, kind, M, V, k)
    pred = c["step_time_s"]
    args = ["--config", f"dp={dp},pp={pp}", "--schedule", kind, "--microbatches", str(M)]
    if kind == "interleaved":
        args += ["--chunks", str(V)]
    if kind == "kfkb":
        args += ["--k", str(k)]
    if mode == "fake":
        sc = c["stage_costs_s"]
        pred -= c["breakdown"]["dp_comm_s"]   # fake compute reduces no gradients
        args += ["--fake-compute", "--unit-ms", "1000", "--cost-f", repr(sc["f"]),
                 "--cost-b", repr(sc["b"]), "--cost-w", repr(sc["w"]), "--act-bytes", str(ACT)]
    else:
        args += ["--model", MODEL]
    meas = train(dp * pp, args, 6 if mode == "real" else 7)
    name = f"dp={dp},pp={pp} {kind}" + (f"/{V}" if kind == "interleaved" else "") + \
           (f"/k={k}" if kind == "kfkb" else "") + f" M={M}"
    rows.append((mode, name, pred, meas))
    print(f"{mode:5s} {name:32s} predicted {pred * 1e3:9.2f} ms  measured {meas * 1e3:9.2f} ms"
          f"  ratio {pred / meas:6.3f}  (bubble+pp {1e3 * (c['breakdown']['bubble_s'] + c['breakdown']['pp_comm_s']):.2f} ms,"
          f" dp {1e3 * c['breakdown']['dp_comm_s']:.2f} ms)", flush=True)

if WHAT in ("fake", "all"):
    F = FAKE_TFLOPS
    for case in [(1, 2, "1f1b", 8), (1, 2, "gpipe", 8), (1, 2, "chimera", 8),
                 (1, 4, "1f1b", 8), (1, 4, "gpipe", 4), (1, 4, "interleaved", 8, 2),
                 (1, 4, "kfkb", 8, 1, 2), (1, 4, "zb-h1", 8), (1, 4, "zb-v", 8),
                 (1, 8, "1f1b", 16), (2, 2, "1f1b", 4), (2, 4, "zb-h1", 8)]:
        run_case("fake", *case[:4], *(case[4:] + (1, 0)[len(case) - 4:]), tflops=F)

if WHAT in ("real", "all"):
    # Achievable FLOP/s of one process: the model's FLOPs of a step over its time.
    js = suggest(1, 4, 1.0, alpha, beta)
    flops = find(js, 1, 1, "1f1b", 4, 1, 0)["breakdown"]["compute_s"] * 1e12
    t = train(1, ["--config", "pp=1", "--schedule", "1f1b", "--microbatches", "4",
                  "--model", MODEL], 6)
    X = flops / t / 1e12
    print(f"calibration: {flops / 1e9:.3f} GFLOP per step of 4 micro-batches in {t * 1e3:.1f} ms:"
          f" {X * 1e3:.2f} GFLOP/s per process")
    for case in [(1, 1, "1f1b", 2), (1, 1, "1f1b", 8), (2, 1, "1f1b", 1), (2, 1, "1f1b", 4),
                 (1, 2, "1f1b", 8), (1, 2, "gpipe", 4), (1, 2, "interleaved", 8, 2),
                 (1, 2, "kfkb", 8, 1, 2), (1, 2, "zb-h1", 8), (1, 2, "zb-v", 4),
                 (1, 2, "chimera", 4)]:
        run_case("real", *case[:4], *(case[4:] + (1, 0)[len(case) - 4:]), tflops=X)

mem_ok = True
if WHAT in ("memory", "all"):
    for P in (2, 4):
        cmd = shlex.split(MPI) + ["-np", str(P), os.environ["BUILD"] + "/search_memory"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        d = json.loads(r.stdout)
        for x in d["runs"]:
            print(f"memory pp={P} {x['schedule']:12s} predicted {x['predicted_activation_bytes']:8.0f} B"
                  f"  runtime {x['runtime_activation_bytes']:8.0f} B  "
                  f"({'equal' if x['ok'] else 'MISMATCH'})")
        mem_ok = mem_ok and r.returncode == 0 and d["all_ok"]
    if WHAT == "memory":
        sys.exit(0 if mem_ok else 1)

ok = sum(1 for r in rows if abs(r[2] / r[3] - 1) <= 0.15)
print(f"\n{ok} of {len(rows)} configurations within 15% "
      f"(fake {sum(1 for r in rows if r[0] == 'fake' and abs(r[2] / r[3] - 1) <= 0.15)}"
      f"/{sum(1 for r in rows if r[0] == 'fake')}, real "
      f"{sum(1 for r in rows if r[0] == 'real' and abs(r[2] / r[3] - 1) <= 0.15)}"
      f"/{sum(1 for r in rows if r[0] == 'real')})")
sys.exit(0 if ok >= 10 and mem_ok else 1)
EOF
