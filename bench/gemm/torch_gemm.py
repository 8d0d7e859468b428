#!/usr/bin/env python3
"""PyTorch's f32 matmul (MKL or oneDNN behind torch.mm) on the square shapes of gemm_bench.c, in
its output format, so that bench/gemm/summarize.py puts it beside Eagle and the BLAS libraries:
  torch_gemm.py [--threads 1,2] [--seconds S] [--peak GFLOPS] [--dtype float32|bfloat16|float16]
Columns as gemm_bench.c's: median wall GFLOP/s over samples of about 20 ms of work, % of the
peak of that many cores (--peak, one core's GFLOP/s: pass what gemm_bench measured in the same
run), GFLOP/s per CPU-second of the process and % of one core's peak."""
import argparse
import statistics
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--threads", default="1,2")
parser.add_argument("--seconds", type=float, default=0.3)
parser.add_argument("--peak", type=float, default=1.0)
parser.add_argument("--square", action="store_true")  # accepted for run.sh; squares only anyway
parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
args = parser.parse_args()
dtype = getattr(torch, args.dtype)
library = "torch" if args.dtype == "float32" else "torch-" + {"bfloat16": "bf16", "float16": "f16"}[args.dtype]

for threads in [int(t) for t in args.threads.split(",")]:
    torch.set_num_threads(threads)
    n = 64
    while n <= 2048:
        g = torch.Generator().manual_seed(n)
        a = (torch.rand(n, n, generator=g) - 0.5).to(dtype)
        b = (torch.rand(n, n, generator=g) - 0.5).to(dtype)
        c = torch.empty(n, n, dtype=dtype)
        flops = 2.0 * n * n * n
        reps = int(20e-3 * args.peak * 1e9 / flops) + 1
        for _ in range(reps):
            torch.mm(a, b, out=c)
        samples = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        while len(samples) < 64 and (len(samples) < 5 or time.perf_counter() - wall0 < args.seconds):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=c)
            samples.append(time.perf_counter() - t0)
        cpu = time.process_time() - cpu0
        wall = statistics.median(samples)
        gflops = flops * reps / wall * 1e-9
        cpu_gflops = flops * reps * len(samples) / cpu * 1e-9
        name = "square %d" % n
        print("%-9s %-22s %5d %5d %5d  NN  %d  %8.1f  %5.1f%%  %8.1f  %5.1f%%" %
              (library, name, n, n, n, threads, gflops, 100 * gflops / (args.peak * threads),
               cpu_gflops, 100 * cpu_gflops / args.peak), flush=True)
        n *= 2
