"""PyTorch eager training tools/eagle/cnn.c's CNN the way bench_train_cnn does: the same layers
(glorot-uniform kernels, no conv/hidden bias, batch norm with Keras' momentum 0.99 and epsilon
1e-3, dropout 0.25/0.25/0.5), Adam (lr 1e-3, eps 1e-7) with the learning rate on cnn_optimizer_new's cosine decay to 0 over the run
(unless --constant-lr), batches of 64 in train.c's shuffled order;
prints the same lines (bench/train_mlp/fashion.py's driver). NCHW, or --channels-last."""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_mlp"))
import fashion  # noqa: E402


def conv_block(c_in, c_out, padding):
    return [nn.Conv2d(c_in, c_out, 3, padding=padding, bias=False),
            nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.01), nn.ReLU()]


def build():
    model = nn.Sequential(
        *conv_block(1, 32, 1), *conv_block(32, 32, 1), nn.MaxPool2d(2), nn.Dropout(0.25),
        *conv_block(32, 64, 1), *conv_block(64, 64, 1), nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(3136, 256, bias=False), nn.BatchNorm1d(256, eps=1e-3, momentum=0.01),
        nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
    for m in model:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


def main():
    def extra(p):
        p.add_argument("--channels-last", action="store_true")
        p.add_argument("--steps", type=int, default=0, help="steps per epoch (0: all)")
        p.add_argument("--constant-lr", action="store_true")
    args = fashion.parse_args(__doc__, extra)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    train_x, train_y = fashion.load(True, args.limit)
    test_x, test_y = fashion.load(False)
    if args.steps:
        n = min(len(train_y), args.steps * args.batch_size)
        train_x, train_y = train_x[:n], train_y[:n]
    train_x, train_y = torch.from_numpy(train_x), torch.from_numpy(train_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = build().to(memory_format=fmt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    autocast, scaler = fashion.torch_autocast(args.precision)
    steps_per_epoch = (len(train_y) + args.batch_size - 1) // args.batch_size
    schedule = None if args.constant_lr else torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=args.epochs * steps_per_epoch, eta_min=0.0)

    def images(x):
        return x.float().mul_(1.0 / 255.0).view(-1, 1, 28, 28).contiguous(memory_format=fmt)

    def step(indices):
        idx = torch.from_numpy(indices)
        x, y = images(train_x[idx]), train_y[idx]
        model.train()
        with autocast():
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if schedule is not None:
            schedule.step()
        return loss.item(), (logits.detach().argmax(1) == y).sum().item()

    def evaluate():
        model.eval()
        hits = loss = 0.0
        with torch.no_grad():
            for s in range(0, len(test_y), 500):
                x, y = images(test_x[s:s + 500]), test_y[s:s + 500]
                with autocast():
                    logits = model(x).float()
                loss += F.cross_entropy(logits, y, reduction="sum").item()
                hits += (logits.argmax(1) == y).sum().item()
        return hits / len(test_y), loss / len(test_y)

    print(f"torch {torch.__version__}: {len(train_y)} training examples, {args.threads} thread(s), "
          f"cnn, batch {args.batch_size}{', channels_last' if args.channels_last else ''}, "
          f"precision {args.precision}",
          flush=True)
    wall_total = cpu_total = 0.0
    trained = 0
    for epoch in range(1, args.epochs + 1):
        order = fashion.shuffle(len(train_y), args.seed, epoch)
        print(f"Epoch {epoch}/{args.epochs}", flush=True)
        loss_sum = hits = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        for s in range(0, len(train_y), args.batch_size):
            idx = order[s:s + args.batch_size]
            loss, batch_hits = step(idx)
            loss_sum += loss * len(idx)
            hits += batch_hits
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        wall_total, cpu_total, trained = wall_total + wall, cpu_total + cpu, trained + len(train_y)
        print(f"  {len(train_y)} samples in {wall:.2f} s ({len(train_y) / wall:.0f} samples/s)  "
              f"loss {loss_sum / len(train_y):.4f}  accuracy {hits / len(train_y):.4f}", flush=True)
        accuracy, test_loss = evaluate()
        print(f"  test accuracy {accuracy:.4f}  test loss {test_loss:.4f}", flush=True)
    print(f"trained {args.epochs} epoch(s) in {wall_total:.2f} s: {trained / wall_total:.0f} "
          f"samples/s; cpu {cpu_total:.2f} s: {trained / cpu_total:.0f} samples per cpu-second",
          flush=True)


if __name__ == "__main__":
    main()
