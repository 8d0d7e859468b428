"""Joins bench_elementwise's and torch_elementwise.py's TSV rows: Eagle and PyTorch GB/s, each
as % of the STREAM triad measured in the same run, and Eagle / PyTorch."""
import sys
from collections import defaultdict

rows = defaultdict(dict)
stream = {}
for line in open(sys.argv[1]):
    who, name, layout, n, threads, _seconds, rate = line.rstrip("\n").split("\t")
    if who == "stream":
        stream[(name, int(threads))] = float(rate)
    else:
        rows[(int(threads), name, layout, int(n))][who] = float(rate)
for threads in sorted({key[0] for key in rows}):
    triad = stream.get(("triad", threads), float("nan"))
    copy = stream.get(("copy", threads), float("nan"))
    print(f"\n{threads} thread(s): STREAM triad {triad:.2f} GB/s, copy {copy:.2f} GB/s")
    print(f"{'op':<8} {'layout':<11} {'elements':>10} {'eagle GB/s':>10} {'%triad':>7} "
          f"{'torch GB/s':>10} {'%triad':>7} {'eagle/torch':>11}")
    for key in sorted((k for k in rows if k[0] == threads), key=lambda k: (k[2] != "contiguous", k[1], k[2], k[3])):
        _, name, layout, n = key
        e, t = rows[key].get("eagle", float("nan")), rows[key].get("torch", float("nan"))
        print(f"{name:<8} {layout:<11} {n:>10} {e:10.2f} {100 * e / triad:6.0f}% {t:10.2f} "
              f"{100 * t / triad:6.0f}% {e / t:11.2f}")
