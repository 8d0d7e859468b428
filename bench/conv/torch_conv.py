"""PyTorch's conv2d on the CNN's layer shapes (bench/conv/conv_bench.c's): forward, input gradient
and filter gradient (torch.ops.aten.convolution_backward), batch 64, NCHW and channels_last, f32
or (--dtype) bfloat16 / float16 (oneDNN through torch.backends.mkldnn), printing the median time
of --repeats calls and GFLOP/s (2 * multiply-adds of the forward per second) by wall and process
CPU time."""
import argparse
import statistics
import time

import torch

LAYERS = [("conv1", 28, 28, 1, 3, 32, 1), ("conv2", 28, 28, 32, 3, 32, 1),
          ("conv3", 14, 14, 32, 3, 64, 1), ("conv4", 14, 14, 64, 3, 64, 1)]


def timed(fn, repeats):
    """Median wall and process CPU seconds of one call, after a warm-up call."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--formats", default="nchw,channels_last")
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__} conv2d, batch {args.batch}, {args.dtype}, "
          f"{args.threads} thread(s), median of {args.repeats}, "
          f"mkldnn {torch.backends.mkldnn.is_available()}")
    g = torch.Generator().manual_seed(7)
    for name, h, w, c, k, o, pad in LAYERS:
        for fmt in args.formats.split(","):
            x = torch.randn(args.batch, c, h, w, generator=g).to(dtype)
            wt = (torch.randn(o, c, k, k, generator=g) * 0.1).to(dtype)
            if fmt == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
                wt = wt.contiguous(memory_format=torch.channels_last)
            y = torch.nn.functional.conv2d(x, wt, padding=pad)
            dy = torch.randn_like(y)
            flops = 2.0 * y.numel() * k * k * c

            def forward():
                torch.nn.functional.conv2d(x, wt, padding=pad)

            def backward(mask):
                def run():
                    torch.ops.aten.convolution_backward(dy, x, wt, None, [1, 1], [pad, pad],
                                                        [1, 1], False, [0, 0], 1, mask)
                return run

            for what, fn in (("forward", forward), ("input grad", backward([True, False, False])),
                             ("filter grad", backward([False, True, False]))):
                wall, cpu = timed(fn, args.repeats)
                print(f"{name:8s} {fmt + ' ' + what:26s} {1e3 * wall:8.2f} ms "
                      f"{flops / wall * 1e-9:8.1f} GFLOP/s wall "
                      f"{flops / cpu * 1e-9:8.1f} GFLOP/s cpu/thread", flush=True)


if __name__ == "__main__":
    main()
