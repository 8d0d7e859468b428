"""PyTorch's half of bench/gpu/run.sh: bench_gpu.c's workloads, timed the same way (wall clock from
the first call to the end of a device sync; medians), printed as the same RESULT lines.

    python3 torch_gpu.py [--only gemm,launch,mlp,cnn] [--sizes 1024,2048,4096,8192] [--steps N]
                         [--device NAME]

GEMMs: torch.matmul, which is cuBLAS (cuBLASLt) on the GPU, in strict f32, TF32 and bf16. The
training steps run in strict f32 (products and cuDNN convolutions), as Eagle's do by default, with
cudnn.benchmark on (PyTorch's fastest convolutions): once eagerly and once replayed as one CUDA
graph (the "whole network capture" of PyTorch's CUDA semantics notes: forward, backward and
Adam(capturable=True) captured with static inputs). Exits 77 when PyTorch or the device is missing.
"""
import argparse
import math
import sys
import time

WORKLOADS = ("gemm", "launch", "mlp", "cnn")
GEMM_MIN_RUN_SECONDS = 0.005  # as bench_gpu.c: the closing sync stays under 1 % of a run
GEMM_RUNS = 10
STEP_BUDGET_SECONDS = 15.0
MIN_STEPS = 10
WARMUP_STEPS = 20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default=",".join(WORKLOADS))
    p.add_argument("--sizes", default="1024,2048,4096,8192")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--device", default="cuda:0")
    args = p.parse_args()
    args.only = set(args.only.split(","))
    if not args.only <= set(WORKLOADS) or args.steps < 1:
        p.error(f"--only takes some of {','.join(WORKLOADS)}; --steps at least 1")
    args.sizes = [int(n) for n in args.sizes.split(",")]
    return args


class NotAvailable(Exception):
    """A workload this device cannot run (reported as n/a, not as an error)."""


def quantile(values, q):
    values = sorted(values)
    return values[int(q * (len(values) - 1) + 0.5)]


def result(workload, impl, text):
    print(f"RESULT workload={workload} impl={impl} {text}", flush=True)


def error(workload, impl, exc):
    why = " ".join(f"{type(exc).__name__}: {exc}".split())
    result(workload, impl, f"status=error error={why}")


class Bench:
    def __init__(self, torch, device, steps):
        self.torch = torch
        self.steps = steps
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def set_tf32(self, allowed):
        """TF32 in products and convolutions, on or off: the newer per-backend settings where this
        PyTorch has them (the old allow_tf32 flags warn there), else the old flags."""
        backends = self.torch.backends
        mode = "tf32" if allowed else "ieee"
        if hasattr(backends.cuda.matmul, "fp32_precision"):
            backends.cuda.matmul.fp32_precision = mode
        else:
            backends.cuda.matmul.allow_tf32 = allowed
        conv = getattr(backends.cudnn, "conv", None)
        if conv is not None and hasattr(conv, "fp32_precision"):
            conv.fp32_precision = mode
        else:
            backends.cudnn.allow_tf32 = allowed

    # ---- GEMM ----

    def matmul_run(self, a, b, calls):
        start = time.perf_counter()
        for _ in range(calls):
            self.torch.matmul(a, b)
        self.sync()
        return (time.perf_counter() - start) / calls

    def gemm_error(self, a, b, c):
        """bench_gpu.c's check: the largest error of c[0, :8] against a float64 dot product,
        relative to sum_k |a[0, k] b[k, j]|."""
        t = self.torch
        row = a[0].to("cpu", t.float64)
        cols = b[:, :8].to("cpu", t.float64)
        got = c[0, :8].to("cpu", t.float64)
        exact = row @ cols
        scale = (row.abs() @ cols.abs()).clamp_min(1e-300)
        return ((got - exact).abs() / scale).max().item()

    def gemm(self, precision, n):
        t = self.torch
        workload = f"gemm_{precision}_{n}"
        self.set_tf32(precision == "tf32")
        gen = t.Generator(device=self.device).manual_seed(1)
        a = t.rand(n, n, device=self.device, generator=gen) * 2 - 1
        b = t.rand(n, n, device=self.device, generator=gen) * 2 - 1
        if precision == "bf16":
            a, b = a.bfloat16(), b.bfloat16()
        self.matmul_run(a, b, 2)  # cuBLAS's heuristics and kernel loading
        first = self.matmul_run(a, b, 1)
        calls = max(1, min(1000, math.ceil(GEMM_MIN_RUN_SECONDS / max(first, 1e-6))))
        median = quantile([self.matmul_run(a, b, calls) for _ in range(GEMM_RUNS)], 0.5)
        err = self.gemm_error(a, b, t.matmul(a, b))
        result(workload, "torch", f"median_ms={median * 1e3:.4f} "
               f"tflops={2.0 * n ** 3 / median * 1e-12:.2f} runs={GEMM_RUNS} "
               f"calls_per_run={calls} rel_err={err:.1e}")

    # ---- launch overhead ----

    def launch(self):
        t = self.torch
        ops, runs = 10000, 11
        a = t.ones(1, device=self.device)
        b = t.ones(1, device=self.device)
        for _ in range(ops // 10):
            a + b
        self.sync()
        wall, cpu = [], []
        for _ in range(runs):
            start, cpu_start = time.perf_counter(), time.thread_time()
            for _ in range(ops):
                a + b
            self.sync()
            wall.append((time.perf_counter() - start) / ops)
            cpu.append((time.thread_time() - cpu_start) / ops)
        value = (a + b).item()
        if value != 2.0:
            result("launch_add1", "torch_eager", f"status=error error=1 + 1 gave {value}")
            return
        median = quantile(wall, 0.5)
        result("launch_add1", "torch_eager", f"median_ms={median * 1e3:.6f} "
               f"us_per_op={median * 1e6:.3f} cpu_us_per_op={quantile(cpu, 0.5) * 1e6:.3f} "
               f"runs={runs} ops_per_run={ops}")

    # ---- training steps ----

    def seed_model(self):
        """tools/eagle/mlp.c's seed model: 784 -> Dense(64, relu) -> Dense(10), Keras'
        glorot-uniform kernels and zero biases."""
        nn = self.torch.nn
        model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
        for m in model:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        return model

    def cnn_model(self):
        """tools/eagle/cnn.c's CNN, as bench/train_cnn/torch_train_cnn.py builds it, but
        channels-last like Eagle's NHWC: the image tensors are channels_last and the flatten reads
        them in NHWC order (a view, where NCHW order would copy)."""
        nn = self.torch.nn

        class FlattenNHWC(nn.Module):
            def forward(self, x):
                return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)

        def conv_block(c_in, c_out):
            return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                    nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.01), nn.ReLU()]

        model = nn.Sequential(
            *conv_block(1, 32), *conv_block(32, 32), nn.MaxPool2d(2), nn.Dropout(0.25),
            *conv_block(32, 64), *conv_block(64, 64), nn.MaxPool2d(2), nn.Dropout(0.25),
            FlattenNHWC(), nn.Linear(3136, 256, bias=False),
            nn.BatchNorm1d(256, eps=1e-3, momentum=0.01), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(256, 10))
        for m in model:
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        return model.to(memory_format=self.torch.channels_last)

    def step_body(self, model, optimizer, x, y):
        """mlp_step's step: forward, cross-entropy from logits, backward, Adam; the loss and the
        number of correct predictions."""
        logits = model(x)
        loss = self.torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        return loss.detach(), (logits.detach().argmax(1) == y).sum()

    def adam(self, model, capturable=False):
        # Keras' epsilon, as Eagle's Adam; PyTorch's default (foreach on the GPU) otherwise.
        return self.torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7,
                                     capturable=capturable)

    def eager_runner(self, build, x, y):
        self.torch.manual_seed(42)
        model = build().to(self.device).train()
        optimizer = self.adam(model)

        def run():
            optimizer.zero_grad(set_to_none=True)
            return self.step_body(model, optimizer, x, y)[0]
        return run

    def graph_runner(self, build, x, y):
        """Whole-network capture: warm-up iterations on a side stream (they also create Adam's
        state and let cudnn.benchmark choose), then forward, backward and the optimizer step
        captured once and replayed on the same static x and y."""
        t = self.torch
        if not self.cuda:
            raise NotAvailable("CUDA graphs need a CUDA device")
        t.manual_seed(42)
        model = build().to(self.device).train()
        optimizer = self.adam(model, capturable=True)
        side = t.cuda.Stream(self.device)
        side.wait_stream(t.cuda.current_stream(self.device))
        with t.cuda.stream(side):
            for _ in range(3):
                optimizer.zero_grad(set_to_none=True)
                self.step_body(model, optimizer, x, y)
        t.cuda.current_stream(self.device).wait_stream(side)
        graph = t.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)  # backward in the capture allocates the grads
        # Captured on the warm-up's stream, where cuBLAS already has its handle and workspace.
        with t.cuda.graph(graph, stream=side):
            static_loss, _ = self.step_body(model, optimizer, x, y)

        def run():
            graph.replay()
            return static_loss
        return run

    def training(self, workload, build, x_shape, memory_format):
        t = self.torch
        self.set_tf32(False)
        t.backends.cudnn.benchmark = True
        batch = x_shape[0]
        gen = t.Generator(device=self.device).manual_seed(7)
        x = t.rand(*x_shape, device=self.device, generator=gen)
        x = x.contiguous(memory_format=memory_format)
        y = (t.arange(batch, device=self.device) * 7 % 10).long()
        runners = {}
        for impl, make in (("torch_eager", self.eager_runner), ("torch_graph", self.graph_runner)):
            try:
                runners[impl] = make(build, x, y)
            except NotAvailable as exc:
                result(workload, impl, f"status=n/a note={exc}")
            except Exception as exc:  # one failed setup must not lose the other's numbers
                error(workload, impl, exc)
        samples = {impl: [] for impl in runners}
        losses = {impl: [] for impl in runners}

        def step(impl, record):
            start = time.perf_counter()
            loss = runners[impl]()
            self.sync()
            elapsed = time.perf_counter() - start
            if record:
                samples[impl].append(elapsed)
                losses[impl].append(loss.item())  # after the timing, as bench_gpu.c reads it

        failed = set()

        def round_robin(record):
            for impl in runners:
                if impl in failed:
                    continue
                try:
                    step(impl, record)
                except Exception as exc:
                    failed.add(impl)
                    error(workload, impl, exc)

        for _ in range(WARMUP_STEPS):
            round_robin(False)
        start = time.perf_counter()
        for done in range(self.steps):
            if done >= MIN_STEPS and time.perf_counter() - start > STEP_BUDGET_SECONDS:
                break
            round_robin(True)
        for impl in runners:
            if impl in failed or not samples[impl]:
                continue
            s = samples[impl]
            result(workload, impl, f"median_ms={quantile(s, 0.5) * 1e3:.4f} "
                   f"p10_ms={quantile(s, 0.1) * 1e3:.4f} p90_ms={quantile(s, 0.9) * 1e3:.4f} "
                   f"steps={len(s)} loss_first={losses[impl][0]:.4f} "
                   f"loss_last={losses[impl][-1]:.4f}")


def main():
    args = parse_args()
    try:
        import torch
    except ImportError as exc:
        print(f"torch_gpu.py: skipped, PyTorch is not installed for {sys.executable}: {exc}",
              file=sys.stderr)
        return 77
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"torch_gpu.py: skipped, PyTorch {torch.__version__} sees no GPU "
              f"(built for CUDA {torch.version.cuda})", file=sys.stderr)
        return 77
    bench = Bench(torch, args.device, args.steps)
    name = torch.cuda.get_device_name(bench.device) if bench.cuda else "host"
    cudnn = torch.backends.cudnn.version() if bench.cuda else None
    print(f"# torch {torch.__version__} on {args.device}: {name} (CUDA {torch.version.cuda}, "
          f"cuDNN {cudnn})", flush=True)
    if "gemm" in args.only:
        for precision in ("f32", "tf32", "bf16"):
            for n in args.sizes:
                try:
                    bench.gemm(precision, n)
                except Exception as exc:
                    error(f"gemm_{precision}_{n}", "torch", exc)
    if "launch" in args.only:
        try:
            bench.launch()
        except Exception as exc:
            error("launch_add1", "torch_eager", exc)
    trainings = (("mlp", "mlp_step", bench.seed_model, (32, 784), torch.contiguous_format),
                 ("cnn", "cnn_step", bench.cnn_model, (64, 1, 28, 28), torch.channels_last))
    for key, workload, build, shape, memory_format in trainings:
        if key not in args.only:
            continue
        try:
            bench.training(workload, build, shape, memory_format)
        except Exception as exc:
            for impl in ("torch_eager", "torch_graph"):
                error(workload, impl, exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
