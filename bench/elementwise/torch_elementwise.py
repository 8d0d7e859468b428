"""PyTorch doing what bench_elementwise does: same ops, sizes, layouts, threads and timing
(median of 7 samples; process CPU time / threads unless --wall). Appends to a TSV file.
--dtype bf16 or f16 runs the ops on torch.bfloat16 / torch.float16 tensors (and the casts from
and to f32), named like bench_elementwise's rows (add.bf16)."""
import argparse
import statistics
import time

import torch

# name: (elements of the op's dtype moved per element, extra f32 bytes, body)
OPS = {
    "add": (3, 0, lambda x, y, x32: x + y),
    "mul": (3, 0, lambda x, y, x32: x * y),
    "exp": (2, 0, lambda x, y, x32: torch.exp(x)),
    "relu": (2, 0, lambda x, y, x32: torch.relu(x)),
    "sum": (1, 0, lambda x, y, x32: torch.sum(x)),
    "tanh": (2, 0, lambda x, y, x32: torch.tanh(x)),
    "sigmoid": (2, 0, lambda x, y, x32: torch.sigmoid(x)),
    "gelu": (2, 0, lambda x, y, x32: torch.nn.functional.gelu(x)),
    "relu_backward": (3, 0, lambda x, y, x32: torch.ops.aten.threshold_backward(y, x, 0)),
}
LOW_PRECISION_OPS = {
    "cast_in": (1, 4, lambda x, y, x32, dtype: x32.to(dtype)),
    "cast_out": (1, 4, lambda x, y, x32, dtype: x.to(torch.float32)),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-elems", type=int, default=64 << 20)
    parser.add_argument("--min-elems", type=int, default=1024)
    parser.add_argument("--no-layouts", action="store_true")
    parser.add_argument("--seconds", type=float, default=0.35)
    parser.add_argument("--wall", action="store_true")
    parser.add_argument("--tsv")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]
    size = torch.tensor([], dtype=dtype).element_size()
    suffix = "" if args.dtype == "f32" else "." + args.dtype
    torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.wall else lambda: time.process_time() / args.threads
    per_sample = args.seconds / 7
    out = open(args.tsv, "a") if args.tsv else None

    def measure(body):
        body()
        iterations = 1
        while True:
            start = clock()
            for _ in range(iterations):
                body()
            elapsed = clock() - start
            if elapsed >= per_sample or iterations >= 1 << 24:
                break
            iterations *= int(per_sample / elapsed) // 2 + 2 if elapsed > 0 else 16
        samples = []
        for _ in range(7):
            start = clock()
            for _ in range(iterations):
                body()
            samples.append((clock() - start) / iterations)
        return statistics.median(samples)

    def report(name, layout, n, seconds, nbytes):
        rate = nbytes / seconds / 1e9
        name += suffix
        print(f"{name:<18} {layout:<12} {n:>10} {seconds * 1e6:9.1f} us {rate:8.2f} GB/s "
              f"{n / seconds / 1e9:7.3f} Gelem/s")
        if out:
            out.write(f"torch\t{name}\t{layout}\t{n}\t{args.threads}\t{seconds:.9g}\t{rate:.4f}\n")

    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    g = torch.Generator().manual_seed(1)
    n = 1024
    while n <= args.max_elems:
        if n < args.min_elems:
            n *= 4
            continue
        x32 = torch.rand(n, generator=g) * 8 - 4
        x = x32.to(dtype)
        y = (torch.rand(n, generator=g) * 8 - 4).to(dtype)
        for name, (elements, extra, fn) in OPS.items():
            report(name, "contiguous", n, measure(lambda: fn(x, y, x32)),
                   (elements * size + extra) * n)
        if args.dtype != "f32":
            for name, (elements, extra, fn) in LOW_PRECISION_OPS.items():
                report(name, "contiguous", n, measure(lambda: fn(x, y, x32, dtype)),
                       (elements * size + extra) * n)
        n *= 4
    if args.no_layouts:
        if out:
            out.close()
        return
    side = 1
    while side * side * 4 <= min(args.max_elems, 16 << 20):
        side *= 2
    n = side * side
    x = (torch.rand(side, side, generator=g) * 8 - 4).to(dtype)
    y = (torch.rand(side, side, generator=g) * 8 - 4).to(dtype)
    r = torch.rand(side, generator=g).to(dtype)
    col = torch.rand(side, 1, generator=g).to(dtype)
    xt = x.t()
    cases = [
        ("add", "row-bcast", lambda: x + r, 12),
        ("add", "col-bcast", lambda: x + col, 12),
        ("add", "transposed", lambda: xt + y, 12),
        ("exp", "transposed", lambda: torch.exp(xt), 8),
        ("sum", "axis0", lambda: x.sum(0), 4),
        ("sum", "axis1", lambda: x.sum(1), 4),
        ("sum", "all-2d", lambda: x.sum(), 4),
        ("sum", "T-axis0", lambda: xt.sum(0), 4),
    ]
    for name, layout, body, nbytes in cases:
        report(name, layout, n, measure(body), nbytes // 4 * size * n)
    if out:
        out.close()


if __name__ == "__main__":
    main()
