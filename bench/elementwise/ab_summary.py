"""Medians over ab.sh's runs: per thread count and op, GB/s, % of the same run's triad and ns per
element before and after, and the speed-up (before's ns / after's)."""
import glob
import os
import statistics
import sys
from collections import defaultdict

rates = defaultdict(list)  # (which, threads, op) -> [(GB/s, %triad, ns per element)]
triads = defaultdict(list)
for path in glob.glob(os.path.join(sys.argv[1], "*.tsv")):
    which, threads, _rep = os.path.basename(path)[:-4].split("-")
    threads = threads.lstrip("t")
    rows = [line.rstrip("\n").split("\t") for line in open(path)]
    triad = next((float(r[6]) for r in rows if r[0] == "stream" and r[1] == "triad"), None)
    if triad is None:  # a run still going
        continue
    triads[(which, threads)].append(triad)
    for r in rows:
        if r[0] == "eagle":
            rates[(which, threads, r[1])].append(
                (float(r[6]), 100 * float(r[6]) / triad, 1e9 * float(r[5]) / int(r[3])))
ops = list(dict.fromkeys(key[2] for key in rates))
for threads in sorted({key[1] for key in triads}, key=int):
    med = lambda which, op, i: statistics.median(x[i] for x in rates[(which, threads, op)])
    print(f"\n{threads} thread(s), {len(triads[('before', threads)])} runs each; triad median "
          f"{statistics.median(triads[('before', threads)]):.2f} GB/s (before's runs), "
          f"{statistics.median(triads[('after', threads)]):.2f} (after's)")
    print(f"{'op':<9} {'GB/s before':>11} {'%triad':>7} {'GB/s after':>11} {'%triad':>7} "
          f"{'ns/el before':>12} {'after':>7} {'speed-up':>8}")
    for op in ops:
        if (("before", threads, op)) not in rates:
            continue
        print(f"{op:<9} {med('before', op, 0):11.2f} {med('before', op, 1):6.0f}% "
              f"{med('after', op, 0):11.2f} {med('after', op, 1):6.0f}% "
              f"{med('before', op, 2):12.3f} {med('after', op, 2):7.3f} "
              f"{med('before', op, 2) / med('after', op, 2):7.2f}x")
