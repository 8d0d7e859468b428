"""What the PyTorch and TensorFlow trainers share with `eagle train`: the Fashion-MNIST IDX loader,
the shuffle (tools/eagle/train.c's splitmix64 Fisher-Yates, bit for bit), the options, and the
training driver that times the loop and prints the same lines as `eagle train`, so run.sh
parses all three the same way."""
import argparse
import gzip
import os
import time

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def load_idx(path):
    """A gzip (or plain) IDX file of unsigned bytes as a numpy uint8 array in its shape, read
    straight into the array (no second copy of the data set in memory)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open if gz else open)(path, "rb") as f:
        head = f.read(4)
        if len(head) < 4 or head[0] or head[1] or head[2] != 0x08:
            raise ValueError(f"{path}: not an unsigned-byte IDX file")
        dims = tuple(int.from_bytes(f.read(4), "big") for _ in range(head[3]))
        data = np.empty(dims, dtype=np.uint8)
        view, got = memoryview(data.reshape(-1)), 0
        while got < data.size:
            n = f.readinto(view[got:])
            if not n:
                raise ValueError(f"{path}: {got} bytes of data for shape {dims}")
            got += n
        if f.read(1):
            raise ValueError(f"{path}: more data than shape {dims} holds")
    return data


def load(train, limit=0, directory=DATA_DIR):
    """(images uint8 [n, 784], labels int64 [n]); the first `limit` examples when limit > 0, as
    `eagle train --limit` does."""
    prefix = "train" if train else "t10k"
    images = load_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"))
    labels = load_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"))
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    return np.ascontiguousarray(images.reshape(len(images), 784)), labels.astype(np.int64)


def shuffle(n, seed, epoch):
    """The permutation train.c's shuffle(order, n, seed, epoch) produces."""
    base = (seed * _GOLDEN + epoch) & _MASK
    k = np.arange(1, n, dtype=np.uint64)  # the k-th draw swaps position i = n - k
    with np.errstate(over="ignore"):
        z = np.uint64(base) + k * np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    i = (n - k.astype(np.int64))
    j = (z % (i.astype(np.uint64) + np.uint64(1))).astype(np.int64)
    order = list(range(n))
    for a, b in zip(i.tolist(), j.tolist()):
        order[a], order[b] = order[b], order[a]
    return np.array(order, dtype=np.int64)


def parse_args(description, extra=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--hidden", default="64", help="hidden sizes, e.g. 64 or 512,512")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--limit", type=int, default=0, help="train on the first N examples only")
    p.add_argument("--precision", default="float32",
                   choices=["float32", "mixed_bfloat16", "mixed_float16"],
                   help="as eagle train --precision (PyTorch: autocast on the CPU)")
    if extra:
        extra(p)
    args = p.parse_args()
    args.hidden = [int(h) for h in args.hidden.split(",")]
    return args


def torch_autocast(precision):
    """PyTorch's counterpart of `eagle train --precision`: (autocast context factory, GradScaler
    or None). mixed_float16 scales the loss dynamically from 2^15, as Eagle and TF do."""
    import contextlib
    import torch
    if precision == "float32":
        return contextlib.nullcontext, None
    dtype = torch.bfloat16 if precision == "mixed_bfloat16" else torch.float16
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 15) if dtype == torch.float16 else None
    return (lambda: torch.autocast("cpu", dtype=dtype)), scaler


def train(args, name, step, evaluate, n_train):
    """Runs args.epochs epochs of step(indices) -> (mean loss, hits) over shuffled batches, then
    evaluate() -> (accuracy, loss) after each; prints what `eagle train` prints. Only the steps
    are timed (the shuffle and the evaluation are not, as in train.c)."""
    print(f"{name}: {n_train} training examples, {args.threads} thread(s), "
          f"hidden {','.join(map(str, args.hidden))}, batch {args.batch_size}, "
          f"precision {getattr(args, 'precision', 'float32')}", flush=True)
    bs = args.batch_size
    train_seconds = 0.0
    for epoch in range(1, args.epochs + 1):
        order = shuffle(n_train, args.seed, epoch)
        print(f"Epoch {epoch}/{args.epochs}", flush=True)
        loss_sum = hits = 0.0
        start = time.perf_counter()
        for s in range(0, n_train, bs):
            idx = order[s:s + bs]
            loss, batch_hits = step(idx)
            loss_sum += loss * len(idx)
            hits += batch_hits
        seconds = time.perf_counter() - start
        train_seconds += seconds
        print(f"  {n_train} samples in {seconds:.2f} s ({n_train / seconds:.0f} samples/s)  "
              f"loss {loss_sum / n_train:.4f}  accuracy {hits / n_train:.4f}", flush=True)
        accuracy, loss = evaluate()
        print(f"  test accuracy {accuracy:.4f}  test loss {loss:.4f}", flush=True)
    print(f"trained {args.epochs} epoch(s) in {train_seconds:.2f} s: "
          f"{n_train * args.epochs / train_seconds:.0f} samples/s", flush=True)
