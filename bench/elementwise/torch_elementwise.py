"""PyTorch doing what bench_elementwise does: same ops, sizes, layouts, threads and timing
(median of 7 samples; process CPU time / threads unless --wall). Appends to a TSV file."""
import argparse
import statistics
import time

import torch

OPS = {
    "add": (12, lambda x, y: x + y),
    "mul": (12, lambda x, y: x * y),
    "exp": (8, lambda x, y: torch.exp(x)),
    "relu": (8, lambda x, y: torch.relu(x)),
    "sum": (4, lambda x, y: torch.sum(x)),
    "tanh": (8, lambda x, y: torch.tanh(x)),
    "sigmoid": (8, lambda x, y: torch.sigmoid(x)),
    "gelu": (8, lambda x, y: torch.nn.functional.gelu(x)),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-elems", type=int, default=64 << 20)
    parser.add_argument("--min-elems", type=int, default=1024)
    parser.add_argument("--no-layouts", action="store_true")
    parser.add_argument("--seconds", type=float, default=0.35)
    parser.add_argument("--wall", action="store_true")
    parser.add_argument("--tsv")
    args = parser.parse_args()
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
        print(f"{name:<8} {layout:<12} {n:>10} {seconds * 1e6:8.1f} us {rate:8.2f} GB/s")
        if out:
            out.write(f"torch\t{name}\t{layout}\t{n}\t{args.threads}\t{seconds:.9g}\t{rate:.4f}\n")

    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    g = torch.Generator().manual_seed(1)
    n = 1024
    while n <= args.max_elems:
        if n < args.min_elems:
            n *= 4
            continue
        x = torch.rand(n, generator=g) * 8 - 4
        y = torch.rand(n, generator=g) * 8 - 4
        for name, (nbytes, fn) in OPS.items():
            report(name, "contiguous", n, measure(lambda: fn(x, y)), nbytes * n)
        n *= 4
    if args.no_layouts:
        if out:
            out.close()
        return
    side = 1
    while side * side * 4 <= min(args.max_elems, 16 << 20):
        side *= 2
    n = side * side
    x = torch.rand(side, side, generator=g) * 8 - 4
    y = torch.rand(side, side, generator=g) * 8 - 4
    r = torch.rand(side, generator=g)
    col = torch.rand(side, 1, generator=g)
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
        report(name, layout, n, measure(body), nbytes * n)
    if out:
        out.close()


if __name__ == "__main__":
    main()
