#!/usr/bin/env python3
"""Compare two training runs of the demo model step by step, in units of
AdamW's own update (docs/runtime.md, "Why --device cuda and cpu differ").

usage: compare_adam.py --lr LR --grad-rel R A_1 ... A_T -- B_1 ... B_T

A_t, B_t: `ptc export` of the version each run saved after step t (every
tensor F32 with its .exp_avg and .exp_avg_sq). AdamW as the model runs it:
beta1 0.9, beta2 0.999, eps 1e-8, no weight decay. Checks, each derived
from lr, the steps, the betas and eps, none a constant picked to pass:

1. each run's optimizer: p_t = p_{t-1} - lr * mhat_t / (sqrt(vhat_t) + eps)
   from its own saved moments, to float32 rounding (t >= 2), and both runs
   started from the same parameters (p_0 = p_1 + lr * u_1, t = 1);
2. the gradients, g_t = (m_t - beta1 m_{t-1}) / (1 - beta1), agree per
   tensor and step: |g_B - g_A|_2 <= R |g_A|_2 (R: the rounding of the
   backward pass, given by the caller);
3. every parameter: |p_B - p_A| <= lr * sum_t 2 K_t, where
   K_t = sqrt(sum_s a_s^2 / b_s) bounds |mhat_t| / sqrt(vhat_t) (a, b: the
   bias-corrected weights of the first and second moments, Cauchy-Schwarz):
   AdamW moves an element by at most K_t lr a step whatever its gradients,
   so two runs whose gradients differ only by rounding can still move an
   ill-conditioned element (its mean gradient mhat cancelling to the
   rounding noise, or |g| near eps) differently by up to 2 K_t lr, and no
   tolerance relative to a tensor's magnitude holds for every element.
Prints per tensor the largest parameter difference in units of lr and of
the tensor's largest magnitude, the gradients' relative difference, and
the elements that moved most with their gradient histories. Exit 1 when a
check fails. Needs numpy."""
import json, sys

import numpy as np

# the float32 hyper-parameters as the kernels hold them (1 - 0.999f is
# 0.00099998713, not 0.001: the device's moments carry it)
B1, B2, EPS = float(np.float32(0.9)), float(np.float32(0.999)), float(np.float32(1e-8))
OM1, OM2 = float(np.float32(1) - np.float32(B1)), float(np.float32(1) - np.float32(B2))
U32 = 2.0 ** -24


def open_st(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, t in hdr.items():
        if t["dtype"] != "F32":
            sys.exit("%s: %s is %s, not F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        out[name] = mm[a:b].view(np.float32)
    return out


def k_bound(t):
    a = [OM1 * B1 ** (t - s) / (1 - B1 ** t) for s in range(1, t + 1)]
    b = [OM2 * B2 ** (t - s) / (1 - B2 ** t) for s in range(1, t + 1)]
    return sum(x * x / y for x, y in zip(a, b)) ** 0.5


def update(m, v, t):
    """AdamW's step t in float64 from the stored float32 moments."""
    mh = m.astype(np.float64) / (1 - B1 ** t)
    vh = v.astype(np.float64) / (1 - B2 ** t)
    return mh / (np.sqrt(vh) + EPS)


def first_grad(run, name, T):
    """|g| of each element at its first step with a non-zero gradient (0: none)."""
    g, m_prev = None, 0.0
    for t in range(1, T + 1):
        m = run[t - 1][name + ".exp_avg"].astype(np.float64)
        gt = np.abs((m - B1 * m_prev) / OM1)
        g = gt if g is None else np.where(g > 0, g, gt)
        m_prev = m
    return g


def main():
    args = sys.argv[1:]
    lr = float(args[args.index("--lr") + 1])
    grad_rel = float(args[args.index("--grad-rel") + 1])
    files = [a for i, a in enumerate(args) if a not in ("--lr", "--grad-rel")
             and (i == 0 or args[i - 1] not in ("--lr", "--grad-rel"))]
    cut = files.index("--")
    fa, fb = files[:cut], files[cut + 1:]
    if len(fa) != len(fb) or not fa:
        sys.exit("usage: compare_adam.py --lr LR --grad-rel R A_1..A_T -- B_1..B_T")
    T = len(fa)
    A = [open_st(f) for f in fa]
    B = [open_st(f) for f in fb]
    K = [k_bound(t) for t in range(1, T + 1)]
    allowed = 2 * sum(K)  # in units of lr
    names = sorted(k for k in A[0] if not k.endswith((".exp_avg", ".exp_avg_sq")))
    bad = 0
    worst = (0.0, None, None)
    # the mechanism: the largest difference by the size of an element's first
    # non-zero gradient against eps (AdamW's first update is g / (|g| + eps):
    # sign-like above eps, proportional below, where a gradient that its sum
    # cancelled to the rounding noise of its terms moves the element by that
    # noise over eps)
    edges = [0, 1, 10, 100, 1e4, float("inf")]
    bins = [[0, 0.0] for _ in edges[1:]]
    rel_worst = 0.0
    print("K_t = %s; every element may differ by 2 sum K_t lr = %.4g lr = %.4g"
          % (", ".join("%.4f" % k for k in K), allowed, allowed * lr))
    print("%-42s %9s %9s %9s %9s" % ("tensor", "max|dp|/lr", "rel", "grad rel", "opt err"))
    for name in names:
        g_prev = {id(A): None, id(B): None}
        opt_err = 0.0
        grad_worst = 0.0
        p0 = []
        for run in (A, B):
            m_prev = np.zeros(run[0][name].shape, np.float64)
            for t in range(1, T + 1):
                p = run[t - 1][name].astype(np.float64)
                m = run[t - 1][name + ".exp_avg"]
                v = run[t - 1][name + ".exp_avg_sq"]
                x = update(m, v, t)
                # the device's float32 rounding of the step: about ten roundings of
                # the ratio (bias corrections, sqrt, eps, division, lr) and one of p
                tol = np.spacing(np.abs(run[t - 1][name])).astype(np.float64) \
                    + 16 * U32 * lr * np.abs(x)
                if t == 1:
                    p0.append((p + lr * x, tol))
                else:
                    prev = run[t - 2][name].astype(np.float64)
                    e = np.abs(p - (prev - lr * x)) / tol
                    opt_err = max(opt_err, float(e.max()))
                m_prev = m
        (pa, ta), (pb, tb) = p0
        opt_err = max(opt_err, float((np.abs(pa - pb) / (ta + tb)).max()))
        # the gradients of each step, from the first moments
        for t in range(1, T + 1):
            def grad(run):
                m = run[t - 1][name + ".exp_avg"].astype(np.float64)
                mp = run[t - 2][name + ".exp_avg"].astype(np.float64) if t > 1 else 0.0
                return (m - B1 * mp) / OM1
            ga, gb = grad(A), grad(B)
            na = float(np.sqrt((ga * ga).sum()))
            if na > 0:
                grad_worst = max(grad_worst, float(np.sqrt(((gb - ga) ** 2).sum())) / na)
        pa, pb = A[-1][name].astype(np.float64), B[-1][name].astype(np.float64)
        d = np.abs(pb - pa)
        r = first_grad(A, name, T) / EPS
        for j, (lo, hi) in enumerate(zip(edges, edges[1:])):
            sel = (r >= lo) & (r < hi)
            if sel.any():
                bins[j][0] += int(sel.sum())
                bins[j][1] = max(bins[j][1], float(d[sel].max()) / lr)
        scale = float(np.abs(pa).max()) or 1.0
        i = int(d.argmax())
        rel_worst = max(rel_worst, float(d[i]) / scale)
        print("%-42s %9.3g %9.3g %9.3g %9.3g" % (name, d[i] / lr, d[i] / scale, grad_worst, opt_err))
        if d[i] / lr > worst[0]:
            worst = (d[i] / lr, name, i)
        if opt_err > 1:
            print("FAIL: %s: a run's update is not AdamW's (lr %g, eps %g) to rounding: %.3g x "
                  "the rounding bound" % (name, lr, EPS, opt_err))
            bad += 1
        if grad_worst > grad_rel:
            print("FAIL: %s: gradients differ by %.3g (relative L2), more than the rounding "
                  "bound %.3g" % (name, grad_worst, grad_rel))
            bad += 1
        lim = allowed * lr + 2 * T * np.spacing(np.abs(pa).astype(np.float32)).astype(np.float64)
        over = int((d > lim).sum())
        if over:
            print("FAIL: %s: %d elements differ by more than 2 sum K_t lr" % (name, over))
            bad += 1
    print("by the first non-zero gradient: |g|/eps in [lo, hi): elements, largest |dp|/lr")
    for (lo, hi), (n, mx) in zip(zip(edges, edges[1:]), bins):
        print("  [%g, %g): %d, %.3g" % (lo, hi, n, mx))
    if worst[1]:
        dl, name, i = worst
        print("largest difference: %s[%d], %.3g lr; its gradients (A | B) and the updates:"
              % (name, i, dl))
        for t in range(1, T + 1):
            row = []
            for run in (A, B):
                m = float(run[t - 1][name + ".exp_avg"].reshape(-1)[i])
                mp = float(run[t - 2][name + ".exp_avg"].reshape(-1)[i]) if t > 1 else 0.0
                v = float(run[t - 1][name + ".exp_avg_sq"].reshape(-1)[i])
                u = (m / (1 - B1 ** t)) / ((v / (1 - B2 ** t)) ** 0.5 + EPS)
                row.append("g %+.4e u %+.4f" % ((m - B1 * mp) / OM1, u))
            print("  step %d: %s | %s" % (t, row[0], row[1]))
    # one line for scripts: the largest difference in units of lr and of its
    # tensor's largest magnitude (the criterion tests/gpu once used, within
    # 1e-4), and the first non-zero gradient of the element that moved most
    if worst[1]:
        dl, name, i = worst
        print("summary: max|dp|/lr %.3g max rel %.3g worst element's first |g|/eps %.3g"
              % (dl, rel_worst, float(first_grad(A, name, T).reshape(-1)[i]) / EPS))
    print("%s: %d check(s) failed" % ("FAIL" if bad else "ok", bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
