"""PyTorch DataLoader peer of `bench_pipeline synthetic`: a map-style Dataset of ELEMENTS items
whose __getitem__ spins until WORK_US of thread CPU time have passed, read one element at a time
(batch_size=None) with num_workers 0, 1 and 2 (persistent workers; the first pass, which starts
them, is not timed). Elements per second, median of ROUNDS passes (configurations interleaved).
One line per configuration: "name elements_per_second".

    python torch_pipeline.py [ELEMENTS] [ROUNDS] [WORK_US]
"""
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

ELEMENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
WORK_US = float(sys.argv[3]) if len(sys.argv) > 3 else 200.0


class Spin(Dataset):
    def __init__(self, work_us):
        self.work_us = work_us

    def __len__(self):
        return ELEMENTS

    def __getitem__(self, i):
        start = time.thread_time()
        while (time.thread_time() - start) * 1e6 < self.work_us:
            pass
        return i


def rate(loader):
    start = time.perf_counter()
    n = 0
    for _ in loader:
        n += 1
    return n / (time.perf_counter() - start)


def main():
    torch.set_num_threads(1)
    loaders = []
    for workers in (0, 1, 2):
        kwargs = dict(batch_size=None, num_workers=workers)
        if workers:
            kwargs.update(persistent_workers=True, prefetch_factor=4)
        loaders.append((f"torch DataLoader workers={workers}", DataLoader(Spin(WORK_US), **kwargs)))
    loaders.append(("torch DataLoader workers=0, no work", DataLoader(Spin(0), batch_size=None)))
    for _, loader in loaders:
        rate(loader)  # starts the workers
    rates = {name: [] for name, _ in loaders}
    for _ in range(ROUNDS):
        for name, loader in loaders:
            rates[name].append(rate(loader))
    print(f"# torch {torch.__version__}: median of {ROUNDS} rounds")
    for name, _ in loaders:
        print(f"{name:<32} {statistics.median(rates[name]):10.0f}")


if __name__ == "__main__":
    main()
