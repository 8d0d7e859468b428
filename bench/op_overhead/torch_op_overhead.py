"""PyTorch eager doing what bench_op_overhead does: same ops, shapes and step, same timing
(wall and this thread's CPU time per iteration, medians of 9 loops)."""
import statistics
import sys
import time

import torch


def measure(name, body, iterations):
    for _ in range(iterations // 10 + 1):
        body()
    samples, cpu_samples = [], []
    for _ in range(9):
        start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(iterations):
            body()
        samples.append((time.perf_counter_ns() - start) / iterations)
        cpu_samples.append((time.thread_time_ns() - cpu_start) / iterations)
    print(f"{name:<28} {statistics.median(samples):10.1f} ns "
          f"{statistics.median(cpu_samples):10.1f} cpu-ns")


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    print(f"torch {torch.__version__}, {threads} thread(s)")
    a1, b1 = torch.ones(1), torch.ones(1)
    a64, b64 = torch.ones(64), torch.ones(64)
    m8, n8 = torch.ones(8, 8), torch.ones(8, 8)
    measure("add 1 element", lambda: a1 + b1, 200000)
    measure("add 64 elements", lambda: a64 + b64, 200000)
    measure("matmul 8x8", lambda: m8 @ n8, 100000)

    torch.manual_seed(1)
    x = torch.rand(32, 784)
    labels = (torch.rand(32) * 10).long()
    w1 = (torch.randn(784, 64) * 0.05).requires_grad_()
    b1 = torch.zeros(64, requires_grad=True)
    w2 = (torch.randn(64, 10) * 0.05).requires_grad_()
    b2 = torch.zeros(10, requires_grad=True)
    params = [w1, b1, w2, b2]

    def step():
        hidden = torch.relu(x @ w1 + b1)
        logits = hidden @ w2 + b2
        loss = torch.nn.functional.cross_entropy(logits, labels)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(g * 0.01)

    measure("mlp 784-64-10 b32 step", step, 2000)


if __name__ == "__main__":
    main()
