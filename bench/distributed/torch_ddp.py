"""PyTorch DistributedDataParallel (gloo, CPU) training what `eagle train` trains, the peer of
`eagle train --distributed`: N processes forked here (no torchrun), each with --threads intra-op
threads, on the models of bench/train_mlp/torch_train.py (--model mlp, glorot-uniform kernels,
zero biases) and bench/train_cnn/torch_train_cnn.py (--model cnn, with the cosine learning-rate
decay of eagle train's CNN), Adam with Keras' defaults. Every global batch of --batch-size
examples comes from train.c's shuffle (fashion.py) and is split into N contiguous slices, one per
rank; each rank's loss is weighted by its slice's share so that DDP's mean of the gradients is
the gradient of the global batch's mean loss (the single-process step). --processes 1 is plain
single-process training (no process group), the baseline. Rank 0 prints eagle train's lines;
samples/s counts the training steps only, in global examples per second."""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train_mlp"))
sys.path.insert(0, os.path.join(HERE, "..", "train_cnn"))
import fashion  # noqa: E402


def build_mlp(hidden):
    layers, units = [], 784
    for h in hidden:
        layers += [torch.nn.Linear(units, h), torch.nn.ReLU()]
        units = h
    layers.append(torch.nn.Linear(units, 10))
    model = torch.nn.Sequential(*layers)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(layer.weight)
            torch.nn.init.zeros_(layer.bias)
    return model


def slices(n, parts):
    """Bounds of `parts` contiguous slices of n items, sizes differing by at most one (the first
    ones larger), as numpy.array_split cuts."""
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for r in range(parts):
        end = start + base + (r < extra)
        bounds.append((start, end))
        start = end
    return bounds


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, args, data, port):
    world = args.processes
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    if world > 1:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    train_x, train_y, test_x, test_y = (torch.from_numpy(a) for a in data)
    n_train = len(train_y)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP checks it anyway)
    cnn = args.model == "cnn"
    if cnn:
        import torch_train_cnn
        model = torch_train_cnn.build()
    else:
        model = build_mlp(args.hidden)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    torch.manual_seed(args.seed + 1000 * rank)  # each rank its own dropout masks
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    bs = args.batch_size
    steps_per_epoch = (n_train + bs - 1) // bs
    schedule = None
    if cnn and not args.constant_lr:
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=args.epochs * steps_per_epoch, eta_min=0.0)

    def inputs(x):
        x = x.float().mul_(1.0 / 255.0)
        return x.view(-1, 1, 28, 28) if cnn else x

    def step(global_indices):
        start, end = slices(len(global_indices), world)[rank]
        idx = torch.from_numpy(global_indices[start:end])
        x, y = inputs(train_x[idx]), train_y[idx]
        net.train()
        logits = net(x)
        loss = F.cross_entropy(logits, y)
        # DDP averages the ranks' gradients: weighting by n_local * world / n_global makes that
        # average the gradient of the global batch's mean loss, also for unequal slices.
        scaled = loss * (len(idx) * world / len(global_indices)) if world > 1 else loss
        optimizer.zero_grad(set_to_none=True)
        scaled.backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
        return loss.item() * len(idx), (logits.detach().argmax(1) == y).sum().item()

    def evaluate():
        model.eval()  # the module itself: DDP's forward would wait for the other ranks
        hits = loss = 0.0
        with torch.no_grad():
            for s in range(0, len(test_y), 500):
                x, y = inputs(test_x[s:s + 500]), test_y[s:s + 500]
                logits = model(x).float()
                loss += F.cross_entropy(logits, y, reduction="sum").item()
                hits += (logits.argmax(1) == y).sum().item()
        return hits / len(test_y), loss / len(test_y)

    def say(text):
        if rank == 0:
            print(text, flush=True)

    what = "cnn" if cnn else "mlp " + "-".join(map(str, [784] + args.hidden + [10]))
    say(f"torch {torch.__version__}{' DDP gloo' if world > 1 else ''}: {n_train} training / "
        f"{len(test_y)} test examples, {world} process(es) x {args.threads} thread(s), {what}, "
        f"batch {bs} ({', '.join(str(e - s) for s, e in slices(bs, world))} per process), "
        f"optimizer adam{' (cosine decay)' if schedule is not None else ''}")
    train_seconds = 0.0
    for epoch in range(1, args.epochs + 1):
        order = fashion.shuffle(n_train, args.seed, epoch)
        say(f"Epoch {epoch}/{args.epochs}")
        loss_sum = hits = 0.0
        if world > 1:
            dist.barrier()  # rank 0 evaluated alone: start the timed steps together
        start = time.perf_counter()
        for s in range(0, n_train, bs):
            loss, batch_hits = step(order[s:s + bs])
            loss_sum += loss
            hits += batch_hits
        seconds = time.perf_counter() - start
        train_seconds += seconds
        if world > 1:  # the global epoch's loss and accuracy, outside the timed steps
            totals = torch.tensor([loss_sum, hits], dtype=torch.float64)
            dist.all_reduce(totals)
            loss_sum, hits = totals.tolist()
        say(f"  {n_train} samples in {seconds:.2f} s ({n_train / seconds:.0f} samples/s)  "
            f"loss {loss_sum / n_train:.4f}  accuracy {hits / n_train:.4f}")
        if rank == 0:
            accuracy, test_loss = evaluate()
            say(f"  test accuracy {accuracy:.4f}  test loss {test_loss:.4f}")
    say(f"trained {args.epochs} epoch(s) in {train_seconds:.2f} s: "
        f"{n_train * args.epochs / train_seconds:.0f} samples/s")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def main():
    def extra(p):
        p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
        p.add_argument("--processes", type=int, default=2, help="DDP ranks; 1: no DDP")
        p.add_argument("--constant-lr", action="store_true",
                       help="the CNN without its cosine learning-rate decay")
        p.set_defaults(hidden="512,512", batch_size=128)
    args = fashion.parse_args(__doc__, extra)
    if args.precision != "float32":
        sys.exit("torch_ddp.py: only --precision float32")
    if args.processes < 1 or args.threads < 1 or args.batch_size < 1 or args.epochs < 1:
        sys.exit("torch_ddp.py: --processes, --threads, --batch-size and --epochs must be >= 1")
    if args.batch_size < args.processes:
        sys.exit(f"torch_ddp.py: a batch of {args.batch_size} cannot be split between "
                 f"{args.processes} processes")
    train_x, train_y = fashion.load(True, args.limit)
    test_x, test_y = fashion.load(False)
    last = len(train_y) % args.batch_size
    if 0 < last < args.processes:
        sys.exit(f"torch_ddp.py: the last batch of {last} example(s) cannot be split between "
                 f"{args.processes} processes; choose another --limit or --batch-size")
    data = (train_x, train_y, test_x, test_y)
    if args.processes == 1:
        run(0, args, data, None)
        return
    # fork: the ranks share the data loaded here (copy on write) instead of reading it N times.
    mp.start_processes(run, args=(args, data, free_port()), nprocs=args.processes, join=True,
                       start_method="fork")


if __name__ == "__main__":
    main()
