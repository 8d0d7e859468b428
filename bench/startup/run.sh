#!/usr/bin/env bash
# `eagle train` from exec to its first training step, and `import torch` for comparison:
#   bench/startup/run.sh [runs]
# Each run execs `eagle train --epochs 1 --limit 32 --threads 1` with EG_STARTUP_TIMING=1, which
# prints the CLOCK_MONOTONIC time at which the first step begins and the CPU time used so far;
# the wall time is measured from just before the exec. Medians over the runs, for a cold start
# (EG_IDX_CACHE=0: the .gz files are decompressed) and a warm one (the decompressed-IDX cache,
# here in a private directory, filled by the first run). On a machine shared with other jobs the
# CPU times are the numbers to read.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
eagle=./build/release/tools/eagle/eagle
[ -x "$eagle" ] || { echo "build first: cmake --preset release && cmake --build --preset release" >&2; exit 1; }
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
python3 - "$eagle" "$runs" "$cache" <<'PY'
import os, statistics, subprocess, sys, time
eagle, runs, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def once(cache_setting):
    env = dict(os.environ, EG_STARTUP_TIMING="1", EG_IDX_CACHE=cache_setting)
    start = time.monotonic_ns()
    p = subprocess.run([eagle, "train", "--epochs", "1", "--limit", "32", "--threads", "1"],
                       env=env, capture_output=True, text=True)
    line = next((l for l in p.stderr.splitlines() if l.startswith("startup:")), None)
    if p.returncode != 0 or line is None:
        sys.exit("eagle train failed:\n" + p.stderr)
    at = float(line.split("monotonic ")[1].split()[0])
    cpu = float(line.split(", ")[-1].split(" ms of CPU")[0])
    return (at - start) / 1e6, cpu

once(cache)  # fills the cache
for name, setting in (("cold (.gz, no cache)", "0"), ("warm (IDX cache)", cache)):
    samples = [once(setting) for _ in range(runs)]
    wall = statistics.median(s[0] for s in samples)
    cpu = statistics.median(s[1] for s in samples)
    print(f"eagle train exec -> first step, {name:22s} wall {wall:8.1f} ms   CPU {cpu:7.1f} ms")

venv_python = "bench/.venv/bin/python"
if os.path.exists(venv_python):
    code = ("import resource, time; t = time.monotonic_ns(); import torch; "
            "u = resource.getrusage(resource.RUSAGE_SELF); "
            "print((time.monotonic_ns() - t) / 1e6, (u.ru_utime + u.ru_stime) * 1e3)")
    samples = []
    for _ in range(runs):
        out = subprocess.run([venv_python, "-c", code], capture_output=True, text=True).stdout
        samples.append([float(v) for v in out.split()])
    print(f"python -c 'import torch' (import alone)          wall {statistics.median(s[0] for s in samples):8.1f} ms   "
          f"CPU {statistics.median(s[1] for s in samples):7.1f} ms (whole interpreter)")
PY
