#!/usr/bin/env python3
"""Size limits of the C tree (STYLE.md: functions under 200 lines, a file does one job).

  check_sizes.py [SRC_DIR] [--list]

Reads every C and CUDA file git tracks below SRC_DIR (default: this script's
checkout): *.c *.h *.cu *.cuh, the tests included. Fails (exit 1) when
  - a function body spans more than MAX_FUNCTION lines (from the line of its
    opening brace's definition to its closing brace), or
  - a file has more than MAX_FILE lines and is not in ONE_JOB, the files that
    are long and still do one job (each with that job in a few words).
--list also prints the longest functions and files (a report, never a failure).

A function is found by its text: outside comments, strings and character
constants, a '{' at brace depth 0 whose statement so far ends in ')' (a
function definition; a struct, union, enum or initialiser does not), up to its
matching '}'. Preprocessor lines are skipped, so a definition must not be
split by #if (none in this tree is).
"""
import os
import re
import subprocess
import sys

MAX_FUNCTION = 200
MAX_FILE = 1000

# Files over MAX_FILE lines that do one job: path -> the job. A unit test
# file tests one module; its length is its cases.
ONE_JOB = {
    "tests/unit/test_ckpt.c": "the unit tests of ptc/ckpt without MPI",
    "tests/unit/test_ckpt_hosts.c": "the unit tests of the cross-host commit (ptc/ckpt/ckpt_hosts.c: "
                                    "journal, replicas, crash cases, tiers) on a thread transport",
    "tests/unit/test_layout.c": "the unit tests of the layout function (ptc/layout/layout.c)",
    "tests/unit/test_store.c": "the unit tests of the store (ptc/store)",
    "tests/unit/test_view.c": "the unit tests of the view library (fuse/view*.c)",
}

EXTS = (".c", ".h", ".cu", ".cuh")


def strip(text):
    """@p text with comments, string and character literals blanked (newlines
    kept, so line numbers stay) and preprocessor lines emptied."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        at_line_start = False
        if c == "\n":
            at_line_start = True
            out.append(c)
            i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j) or " ")
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


NAME = re.compile(r"([A-Za-z_]\w*)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*$", re.S)


def functions(text):
    """(name, first line, last line) of every function definition in @p text."""
    s = strip(text)
    found = []
    depth = 0
    stmt_start = 0  # index where the current top-level statement began
    open_at = None
    name = None
    for i, c in enumerate(s):
        if c == "{":
            if depth == 0:
                head = s[stmt_start:i].rstrip()
                m = NAME.search(head) if head.endswith(")") else None
                if m and m.group(1) not in ("if", "while", "for", "switch", "sizeof"):
                    name = m.group(1)
                    open_at = stmt_start + len(head) - len(head.lstrip())
                    open_at += len(s[open_at:i]) - len(s[open_at:i].lstrip())
                else:
                    name = None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if name:
                    first = s.count("\n", 0, open_at) + 1
                    last = s.count("\n", 0, i) + 1
                    found.append((name, first, last))
                    name = None
                stmt_start = i + 1
            if depth < 0:
                depth = 0
        elif c == ";" and depth == 0:
            stmt_start = i + 1
    return found


def tracked(src):
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(src):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(root, x), src) for x in names]
    return sorted(f for f in files if f.endswith(EXTS))


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    src = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    listing = "--list" in argv
    problems = []
    spans, sizes = [], []
    for rel in tracked(src):
        path = os.path.join(src, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        sizes.append((lines, rel))
        if lines > MAX_FILE and rel not in ONE_JOB:
            problems.append(f"{rel}: {lines} lines (over {MAX_FILE}; split it by job, or name "
                            f"its one job in ONE_JOB)")
        for name, first, last in functions(text):
            n = last - first + 1
            spans.append((n, f"{rel}:{first}-{last} {name}"))
            if n > MAX_FUNCTION:
                problems.append(f"{rel}:{first}: {name} is {n} lines (over {MAX_FUNCTION})")
    for rel in sorted(ONE_JOB):
        if os.path.isfile(os.path.join(src, "scripts", "check_sizes.py")) and \
                not any(r == rel for _, r in sizes):
            problems.append(f"{rel}: in ONE_JOB but not in the tree")
    if listing:
        print("longest functions:")
        for n, what in sorted(spans, reverse=True)[:15]:
            print(f"  {n:5d}  {what}")
        print("longest files:")
        for n, rel in sorted(sizes, reverse=True)[:15]:
            job = f"  (one job: {ONE_JOB[rel]})" if rel in ONE_JOB else ""
            print(f"  {n:5d}  {rel}{job}")
    for p in problems:
        print(p)
    print(f"check_sizes: {len(sizes)} files, {len(spans)} functions, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
