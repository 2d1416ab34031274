#!/usr/bin/env python3
"""The configuration matrices of the tests, in two tiers.

    python3 tests/pairwise.py NAME=V1,V2,... [NAME=...]

prints one configuration per line, the factors' values in the order given,
separated by spaces. By default (the fast tier, `make test`) the lines are a
pairwise subset: every value of every factor meets every value of every
other factor on at least one line, which for a few factors of a few values
is a small fraction of the product (7x2x2x2 = 56: 14 lines). With
PTC_TEST_FULL=1 in the environment (the `slow` label, `make test-slow`) the
lines are the whole product, in order. With PTC_TEST_EACH=1 (the
sanitizer pass, `make test-asan`, which looks for memory errors rather than
for the configurations' interplay) the lines are the pairwise subset's
lines, in order, that show some factor's value no earlier line showed: every
value of every factor at least once (as many lines as the largest factor has
values, or a few more). Deterministic: the same arguments give the same
lines, so a failure names a configuration that reruns.

The subset is built greedily: each new line starts from the first pair not
yet covered and gives every other factor the value that covers the most new
pairs (the first such value on a tie); it ends when every pair is covered
(checked before printing).
"""
import itertools
import os
import sys


def pairs_of(row):
    return {(i, row[i], j, row[j]) for i in range(len(row)) for j in range(i + 1, len(row))}


def pairwise(values):
    n = len(values)
    todo = set()
    for i in range(n):
        for j in range(i + 1, n):
            todo |= {(i, a, j, b) for a in values[i] for b in values[j]}
    everything = set(todo)
    rows = []
    while todo:
        i, a, j, b = min(todo, key=lambda p: (p[0], p[2], values[p[0]].index(p[1]),
                                              values[p[2]].index(p[3])))
        row = [None] * n
        row[i], row[j] = a, b
        for k in range(n):
            if row[k] is not None:
                continue
            def gain(v):
                return sum((min(k, m), row[min(k, m)] if m < k else v,
                            max(k, m), v if m < k else row[max(k, m)]) in todo
                           for m in range(n) if row[m] is not None and m != k)
            row[k] = max(values[k], key=lambda v: (gain(v), -values[k].index(v)))
        todo -= pairs_of(row)
        rows.append(row)
    covered = set().union(*(pairs_of(r) for r in rows)) if rows else set()
    assert everything <= covered, "pairwise: a pair is not covered"
    return rows


def each_value(rows):
    """The rows, in order, that show a (factor, value) no earlier row showed."""
    seen, keep = set(), []
    for r in rows:
        new = {(i, v) for i, v in enumerate(r)} - seen
        if new:
            keep.append(r)
            seen |= new
    return keep


def main(argv):
    names, values = [], []
    for arg in argv:
        name, eq, vals = arg.partition("=")
        if not eq or not name or not vals:
            sys.exit("pairwise.py: expected NAME=V1,V2,..., not %r" % arg)
        names.append(name)
        values.append(vals.split(","))
    if not values:
        sys.exit("usage: pairwise.py NAME=V1,V2,... [NAME=...]")
    if os.environ.get("PTC_TEST_FULL") == "1" or len(values) == 1:
        rows = [list(r) for r in itertools.product(*values)]
    else:
        rows = pairwise(values)
        if os.environ.get("PTC_TEST_EACH") == "1":
            rows = each_value(rows)
    for r in rows:
        print(" ".join(r))


if __name__ == "__main__":
    main(sys.argv[1:])
