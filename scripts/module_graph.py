#!/usr/bin/env python3
"""The module graph of libptc, read from a build, checked against DESIGN.md.

  module_graph.py BUILD_DIR [--dot] [--check-includes]

From BUILD_DIR/compile_commands.json it takes every library source file
(base/ kernels/ ptc/ dataset/ reshard/ fuse/ exec/*/, C and CUDA) and the
ptc command's (cli/), then
  - runs the file's own compile command with -MM: every header it includes,
    directly or not, with staged links resolved to the source tree;
  - reads its object file with nm: the functions it calls and defines.
An arrow A -> B between modules means a file of A includes a header of B or
calls a function B defines. The check fails (exit 1) on an arrow that
DESIGN.md's order does not allow, and on a circle of files: files of one
module that call each other in a loop (a cycle of the file call graph).

--dot prints the module graph in Graphviz form instead of the report.
--check-includes also proves the include paths enforce the order: a file
that includes a header it must not see (a module above, a module beside, a
lower module's private header) is compiled with a module's real flags and
must fail; a control include it may see must compile.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

# DESIGN.md, "Layout": an arrow means "may include / link"; the relation is
# transitive, and every module may use base.
ORDER = {
    "cli": {"model", "runtime", "sched", "fuse", "dataset", "reshard", "ckpt", "store",
            "formats", "layout", "kernels", "base"},
    # exec/model -> dataset: a training job reads its data by the epoch order
    # and counts it (added to DESIGN.md's order with the training job)
    "model": {"runtime", "sched", "reshard", "dataset", "ckpt", "store", "formats", "layout",
              "kernels", "base"},
    # exec/runtime -> reshard: an elastic resize moves a live job's state by
    # the planner and the in-memory executor (added with online resize)
    "runtime": {"sched", "reshard", "store", "formats", "layout", "kernels", "base"},
    "sched": {"base"},
    "fuse": {"dataset", "store", "formats", "layout", "kernels", "base"},
    "dataset": {"store", "formats", "layout", "kernels", "base"},
    # reshard -> ckpt (DESIGN.md: reshard -> ptc): loading a version spread
    # over hosts reads each host's part through the checkpoint protocol
    "reshard": {"ckpt", "store", "formats", "layout", "kernels", "base"},
    # ptc/, inside: ckpt -> store -> formats, layout
    "ckpt": {"store", "formats", "layout", "kernels", "base"},
    "store": {"formats", "layout", "kernels", "base"},
    "formats": {"kernels", "base"},
    "layout": {"kernels", "base"},
    "kernels": {"base"},
    "base": set(),
}
FOLDERS = [("exec/sched/", "sched"), ("exec/runtime/", "runtime"), ("exec/model/", "model"),
           ("base/", "base"), ("kernels/", "kernels"), ("ptc/layout/", "layout"),
           ("ptc/formats/", "formats"), ("ptc/store/", "store"), ("ptc/ckpt/", "ckpt"),
           ("dataset/", "dataset"), ("reshard/", "reshard"), ("fuse/", "fuse"), ("cli/", "cli")]
LABEL = {"layout": "ptc/layout", "formats": "ptc/formats", "store": "ptc/store",
         "ckpt": "ptc/ckpt", "sched": "exec/sched", "runtime": "exec/runtime",
         "model": "exec/model"}


def module_of(rel, owners):
    if rel.startswith("include/ptc/"):
        return owners.get(os.path.basename(rel))
    for prefix, mod in FOLDERS:
        if rel.startswith(prefix):
            return mod
    return None


def public_owners(build):
    """include/ptc/<h> -> module, from the staged public headers."""
    owners = {}
    stage = os.path.join(build, "stage")
    for mod in os.listdir(stage):
        pub = os.path.join(stage, mod, "public", "ptc")
        if os.path.isdir(pub):
            for h in os.listdir(pub):
                owners[h] = mod
    return owners


def compile_argv(entry):
    argv = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = [], False
    obj = None
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "-o":
            obj = argv[i + 1]
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    return out, obj


def includes_of(entry, top):
    argv, _ = compile_argv(entry)
    if "nvcc" in os.path.basename(argv[0]):
        # nvcc: the host compiler's view of the same file is enough here
        argv = argv[:1] + ["-M"] + [a for a in argv[1:] if a != entry["file"]] + [entry["file"]]
    else:
        argv = argv + ["-MM"]
    r = subprocess.run(argv, cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("module_graph: cannot list the includes of %s:\n%s" %
                         (entry["file"], r.stderr))
    deps = r.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    out = set()
    for d in deps:
        p = os.path.realpath(os.path.join(entry["directory"], d))
        if p.startswith(top + os.sep):
            out.add(os.path.relpath(p, top))
    return out


def nm_symbols(obj):
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True)
    if r.returncode != 0:
        return set(), set()
    defined, used = set(), set()
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRVWC" or kind in "tdbr":
            if kind.isupper() or kind in "W":
                defined.add(name)
    return defined, used


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_includes(entries, top):
    """Compile deliberate bad includes with real module flags: each must fail."""
    by_mod = {}
    for e in entries:
        rel = os.path.relpath(e["file"], top)
        m = module_of(rel, {})
        if m and m != "cli" and not e["file"].endswith(".cu") and m not in by_mod:
            by_mod[m] = e
    cases = [  # (module whose flags, include, must compile)
        ("kernels", "ptc/box.h", True),            # base: allowed
        ("kernels", "ptc/store.h", False),         # ptc is above kernels
        ("base", "kernels/pack.h", False),         # kernels is above base
        ("store", "ptc/sched.h", False),           # beside: exec/sched
        ("store", "ptc/view.h", False),            # above: fuse
        ("store", "ptc/ckpt.h", False),            # ptc/ckpt is above ptc/store
        ("layout", "ptc/safetensors.h", False),    # beside: ptc/formats
        ("formats", "ptc/store.h", False),         # ptc/store is above ptc/formats
        ("ckpt", "ptc/store/store_ranks.h", True), # ptc/store's interface: allowed
        ("dataset", "ptc/store.h", True),          # ptc: allowed
        ("dataset", "ptc/store/store_internal.h", False),  # ptc/store's private header
        ("fuse", "kernels/kernels_internal.h", False),
        ("reshard", "ptc/dataset.h", False),       # beside: dataset
        ("sched", "ptc/store.h", False),           # exec/sched uses base only
        ("runtime", "ptc/exec_model.h", False),    # exec/model is above
        ("model", "ptc/exec.h", True),             # exec/runtime: allowed
        ("model", "exec/runtime/runtime_internal.h", False),
    ]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for mod, header, ok in cases:
            e = by_mod[mod]
            argv, _ = compile_argv(e)
            argv = [a for a in argv if a != e["file"]]
            src = os.path.join(tmp, "probe.c")
            with open(src, "w") as f:
                f.write('#include "%s"\nint ptc_probe(void);\nint ptc_probe(void) { return 0; }\n'
                        % header)
            r = subprocess.run(argv + ["-fsyntax-only", src], cwd=e["directory"],
                               capture_output=True, text=True)
            compiled = r.returncode == 0
            verdict = "ok" if compiled == ok else "WRONG"
            if compiled != ok:
                bad += 1
            print("include %-34s from %-12s %-14s %s" %
                  (header, LABEL.get(mod, mod), "compiles" if compiled else "is rejected",
                   verdict))
    return bad


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        raise SystemExit(__doc__)
    build = os.path.realpath(args[0])
    top = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    owners = public_owners(build)
    files = {}  # rel path -> (module, entry)
    for e in entries:
        rel = os.path.relpath(os.path.realpath(e["file"]), top)
        m = module_of(rel, owners)
        if m:
            files[rel] = (m, e)

    arrows = {}   # (from, to) -> example
    defined_in = {}
    uses = {}
    inc_graph = {}
    for rel, (m, e) in sorted(files.items()):
        incs = includes_of(e, top)
        inc_graph[rel] = incs
        for h in incs:
            hm = module_of(h, owners)
            if hm and hm != m:
                arrows.setdefault((m, hm), "%s includes %s" % (rel, h))
        _, obj = compile_argv(e)
        obj = os.path.join(e["directory"], obj)
        d, u = nm_symbols(obj)
        for s in d:
            defined_in.setdefault(s, set()).add(rel)
        uses[rel] = u
    calls = {}
    for rel, u in uses.items():
        m = files[rel][0]
        for s in u:
            for other in defined_in.get(s, ()):
                if other == rel:
                    continue
                calls.setdefault(rel, set()).add(other)
                om = files[other][0]
                if om != m:
                    arrows.setdefault((m, om), "%s calls %s (%s)" % (rel, s, other))

    if "--dot" in sys.argv:
        print("digraph ptc {\n  rankdir=TB; node [shape=box];")
        for (a, b) in sorted(arrows):
            style = "" if b in ORDER[a] else " [color=red]"
            print('  "%s" -> "%s"%s;' % (LABEL.get(a, a), LABEL.get(b, b), style))
        print("}")
        return 0

    bad = 0
    print("modules and their arrows (measured from the build):")
    for a in ORDER:
        outs = sorted(b for (x, b) in arrows if x == a)
        print("  %-13s -> %s" % (LABEL.get(a, a), ", ".join(LABEL.get(b, b) for b in outs) or "-"))
    for (a, b), why in sorted(arrows.items()):
        if b not in ORDER[a]:
            print("AGAINST THE ORDER: %s -> %s: %s" % (LABEL.get(a, a), LABEL.get(b, b), why))
            bad += 1
    for comp in cycles(calls):
        print("CIRCLE OF FILES (they call each other): %s" % ", ".join(comp))
        bad += 1
    for comp in cycles({k: set(v) for k, v in inc_graph.items()}):
        print("CIRCLE OF INCLUDES: %s" % ", ".join(comp))
        bad += 1
    print("%d files, %d module arrows, %d problems" % (len(files), len(arrows), bad))
    if "--check-includes" in sys.argv:
        bad += check_includes(entries, top)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
