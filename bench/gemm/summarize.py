#!/usr/bin/env python3
"""Medians per (shape, threads) and library of bench/gemm/run.sh output lines (stdin): wall GFLOP/s
and GFLOP/s per CPU-second, side by side, with each library's ratio to OpenBLAS."""
import collections
import statistics
import sys

rows = collections.defaultdict(list)
order, libs = [], []
for line in sys.stdin:
    p = line.split()
    if len(p) < 12 or p[0] == "library" or not p[-1].endswith("%"):
        continue
    lib, shape, threads = p[0], " ".join(p[1:-9]), p[-5]
    key = (shape, threads)
    if key not in order:
        order.append(key)
    if lib not in libs:
        libs.append(lib)
    rows[(lib,) + key].append((float(p[-4]), float(p[-2])))
print("%-22s t " % "shape" + "".join("%24s" % l for l in libs))
for key in sorted(order, key=lambda k: (k[1], order.index(k))):
    cells = []
    base = rows.get(("openblas",) + key)
    for lib in libs:
        v = rows.get((lib,) + key)
        if not v:
            cells.append("%24s" % "-")
            continue
        wall = statistics.median(x[0] for x in v)
        cpu = statistics.median(x[1] for x in v)
        ratio = ""
        if base and lib != "openblas":
            ratio = " x%.2f" % (cpu / statistics.median(x[1] for x in base))
        cells.append("%24s" % ("%.1f/%.1f%s" % (wall, cpu, ratio)))
    print("%-22s %s " % key + "".join(cells))
print("cells: median wall GFLOP/s / median GFLOP/s per CPU-second [x ratio to OpenBLAS, CPU-based]")
