#!/usr/bin/env bash
# Eagle vs PyTorch on the GPU, side by side in one run: square GEMMs in f32, TF32 and bf16 against
# torch.matmul (cuBLAS), the cost of one small op, and the seed model's and the CNN's training
# steps, eager and as graphs. Prints one table of medians with Eagle / peer ratios and the
# issue's goals, and writes it (with the raw RESULT lines) to OUTPUT when given.
#   bench/gpu/run.sh [--bin PATH] [--only LIST] [--sizes LIST] [--steps N] [--device NAME]
#                    [OUTPUT]
#     --bin PATH    the bench_gpu binary (default $EAGLE_BENCH_GPU, else
#                   build/release/bench/bench_gpu of this checkout)
#     --only LIST   of gemm,launch,mlp,cnn (default all)
#     --sizes LIST  GEMM sizes (default 1024,2048,4096,8192)
#     --steps N     timed training steps per mode (default 200)
#     --device NAME where both run (default cuda:0; cpu tries the harness without a GPU)
# PyTorch is python3's ($EAGLE_BENCH_PYTHON to use another). Each of the three processes (PyTorch,
# Eagle, Eagle with EG_CUDA_TF32=1 for the TF32 GEMMs) is stopped after $EAGLE_BENCH_TIMEOUT
# seconds (default 60); what it printed until then is kept. A ratio is Eagle's speed over the
# peer's (> 1: Eagle is faster). Exits 77 when PyTorch or a GPU is missing, 1 when a process
# failed or timed out (the table shows what was measured), 2 on a usage or set-up error.
set -euo pipefail
self=$(realpath "$0")
here=$(dirname "$self")
bin=${EAGLE_BENCH_GPU:-$here/../../build/release/bench/bench_gpu}
python=${EAGLE_BENCH_PYTHON:-python3}
limit=${EAGLE_BENCH_TIMEOUT:-60}
only="gemm,launch,mlp,cnn" sizes="1024,2048,4096,8192" steps=200 device=cuda:0 output=""
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
    *) [ -z "$output" ] || { echo "run.sh: one OUTPUT only" >&2; exit 2; }; output=$1; shift ;;
  esac
done
if [ ! -x "$bin" ]; then
  echo "run.sh: no bench_gpu at $bin: build it in a CUDA build (cmake --build BUILD --target" \
       "bench_gpu) and pass --bin PATH or set EAGLE_BENCH_GPU" >&2
  exit 2
fi
# A binary carried to another machine fails to start without its libraries (OpenBLAS, the CUDA
# runtime): say which before spending device time.
if command -v ldd >/dev/null && missing=$(ldd "$bin" 2>/dev/null | grep 'not found'); then
  echo "run.sh: $bin lacks shared libraries (set LD_LIBRARY_PATH):" >&2
  echo "$missing" >&2
  exit 2
fi
if ! command -v "$python" >/dev/null; then
  echo "run.sh: skipped: no $python for PyTorch" >&2
  exit 77
fi
limiter=()
command -v timeout >/dev/null && limiter=(timeout --kill-after=5 "$limit")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--only "$only" --sizes "$sizes" --steps "$steps" --device "$device")
failed=""

# run NAME COMMAND...: stdout to $tmp/NAME.out, stderr after it ends; exits 77 on 77 (a missing
# GPU or PyTorch), notes any other failure.
run() {
  local name=$1 rc=0 started=$SECONDS
  shift
  echo "run.sh: $name ..." >&2
  ${limiter[@]+"${limiter[@]}"} "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  cat "$tmp/$name.err" >&2
  if [ "$rc" -eq 77 ]; then
    echo "run.sh: skipped: $name found no GPU or no PyTorch (above)" >&2
    exit 77
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    failed+=" $name (stopped after ${limit}s)"
  elif [ "$rc" -ne 0 ]; then
    failed+=" $name (exit $rc)"
  fi
  echo "run.sh: $name took $((SECONDS - started)) s" >&2
}

run torch "$python" "$here/torch_gpu.py" "${args[@]}"
run eagle "$bin" "${args[@]}"
if [[ ",$only," == *,gemm,* ]]; then
  run eagle_tf32 env EG_CUDA_TF32=1 "$bin" --only gemm --sizes "$sizes" --device "$device"
fi

table=$("$python" - "$tmp"/torch.out "$tmp"/eagle.out "$tmp"/eagle_tf32.out <<'EOF'
import os
import sys

results, headers = {}, []
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("#") and line not in headers:
            headers.append(line)
        if not line.startswith("RESULT "):
            continue
        fields, rest = {}, line[len("RESULT "):]
        for free in (" error=", " note="):  # free text to the end of the line
            if free in rest:
                rest, fields[free.strip(" =")] = rest.split(free, 1)
        for token in rest.split():
            key, _, value = token.partition("=")
            fields[key] = value
        results[(fields.get("workload"), fields.get("impl"))] = fields


def cell(workload, impl, unit="ms"):
    """(text, median in ms or None) of one measurement."""
    r = results.get((workload, impl))
    if r is None:
        return "missing", None
    if r.get("status") == "n/a":
        note = r.get("note", "")
        return ("n/a (bf16 not implemented)" if "bf16 not implemented" in note
                else f"n/a ({note})"), None
    if r.get("status") == "error":
        why = r.get("error", "")
        return "error: " + (why if len(why) <= 60 else why[:57] + "..."), None
    ms = float(r["median_ms"])
    if unit == "us":
        return f"{float(r['us_per_op']):.2f} us/op", ms
    if "tflops" in r:  # the error tells a strict f32 product (~1e-7) from a TF32 one (~1e-4)
        return f"{ms:.3f} ms, {float(r['tflops']):.1f} TFLOP/s, err {r['rel_err']}", ms
    return f"{ms:.3f} ms", ms


rows = []  # workload, eagle impl, eagle cell, peer impl, peer cell, ratio, goal, met
goals_total = goals_met = 0


def row(label, eagle_impl, eagle, peer_impl, peer, goal=None, unit="ms"):
    global goals_total, goals_met
    eagle_text, eagle_ms = cell(*eagle, unit=unit)
    peer_text, peer_ms = cell(*peer, unit=unit)
    if eagle_text == peer_text == "missing":  # a workload left out with --only
        return
    ratio, met = "-", "-"
    if eagle_ms and peer_ms:
        value = peer_ms / eagle_ms  # Eagle's speed over the peer's
        ratio = f"{value:.2f}x"
        if goal is not None:
            met = "yes" if value >= goal else "no"
    elif goal is not None:
        met = "n/a"
    if goal is not None:
        goals_total += 1
        goals_met += met == "yes"
    rows.append((label, eagle_impl, eagle_text, peer_impl, peer_text, ratio,
                 f">= {goal:.2f}x" if goal is not None else "-", met))


sizes = sorted({int(w.rsplit("_", 1)[1]) for w, _ in results if w and w.startswith("gemm_")})
for precision in ("f32", "tf32", "bf16"):
    for n in sizes:
        w = f"gemm_{precision}_{n}"
        row(f"GEMM {precision} n={n}", "eagle", (w, "eagle"), "torch.matmul (cuBLAS)",
            (w, "torch"), goal=0.90)
row("1-element add, 10000 queued", "eagle eager", ("launch_add1", "eagle_eager"),
    "torch eager", ("launch_add1", "torch_eager"), unit="us")
row("seed step (MLP b32)", "eagle eager", ("mlp_step", "eagle_eager"), "torch eager",
    ("mlp_step", "torch_eager"), goal=2.0)
row("seed step (MLP b32)", "eagle lazy", ("mlp_step", "eagle_lazy"), "torch eager",
    ("mlp_step", "torch_eager"))
row("seed step (MLP b32)", "eagle graph", ("mlp_step", "eagle_graph"), "torch CUDA graph",
    ("mlp_step", "torch_graph"))
row("seed step (MLP b32)", "eagle graph", ("mlp_step", "eagle_graph"), "eagle eager",
    ("mlp_step", "eagle_eager"), goal=3.0)
row("CNN step (b64)", "eagle eager", ("cnn_step", "eagle_eager"), "torch eager (cuDNN)",
    ("cnn_step", "torch_eager"), goal=1.0)
row("CNN step (b64)", "eagle graph", ("cnn_step", "eagle_graph"), "torch CUDA graph",
    ("cnn_step", "torch_graph"), goal=1.0)

titles = ("workload", "Eagle", "Eagle median", "peer", "peer median", "ratio", "goal", "met")
widths = [max(len(r[i]) for r in rows + [titles]) for i in range(len(titles))]


def line(values):
    return "| " + " | ".join(v.ljust(widths[i]) for i, v in enumerate(values)) + " |"


out = headers + ["", line(titles), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
out += [line(r) for r in rows]
out += ["", f"goals met: {goals_met} of {goals_total} (ratio = Eagle's speed / the peer's: "
        "peer median / Eagle median; medians of wall time to a device sync)"]
print("\n".join(out))
EOF
)
echo "$table"
if [ -n "$failed" ]; then
  echo "run.sh: failed:$failed (the table shows what they printed before)" >&2
fi
if [ -n "$output" ]; then
  { echo "$table"; echo; echo "raw results ($(date -u +%Y-%m-%dT%H:%M:%SZ)):";
    cat "$tmp"/*.out; } >"$output"
  echo "run.sh: table written to $output" >&2
fi
[ -z "$failed" ]
