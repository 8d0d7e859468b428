"""PyTorch's int8 inference on the shapes bench_approx times (the CNN's layers, batch 500): the
Dense layers through dynamic quantization (torch.ao.quantization.quantize_dynamic: int8 weights,
activations quantized per call, the same scheme as Eagle's eg_dense_int8) and the convolutions
through static quantization (fbgemm, per-channel weights, calibrated activations, the int8 tensor
kept between quantize and dequantize as a quantized model would). Prints one line per layer:
f32 ms, int8 ms (medians of --repeat timed calls), speed-up and relative error.

    bench/.venv/bin/python bench/approx/torch_int8.py [--threads N] [--repeat R]
"""
import argparse
import time

import torch
import torch.ao.quantization as tq


def median_ms(fn, repeat):
    fn()  # warm up (and let fbgemm pack)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return 1e3 * times[len(times) // 2]


def relative_error(a, b):
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


class QuantConv(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.quant, self.conv, self.dequant = tq.QuantStub(), conv, tq.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.conv(self.quant(x)))


def conv_row(name, size, c_in, c_out, repeat, generator):
    x = torch.rand(500, c_in, size, size, generator=generator).contiguous(
        memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(c_in, c_out, 3, padding=1, bias=False).eval()
    model = QuantConv(conv).eval()
    model.qconfig = tq.get_default_qconfig("fbgemm")
    prepared = tq.prepare(model)
    with torch.no_grad():
        prepared(x[:64])  # calibration
        quantized = tq.convert(prepared)
        exact = conv(x)
        approx = quantized(x)
        f32 = median_ms(lambda: conv(x), repeat)
        int8 = median_ms(lambda: quantized(x), repeat)
    return name, f32, int8, relative_error(approx, exact)


def dense_row(name, inputs, units, repeat, generator):
    x = torch.rand(500, inputs, generator=generator)
    linear = torch.nn.Sequential(torch.nn.Linear(inputs, units)).eval()
    quantized = tq.quantize_dynamic(linear, {torch.nn.Linear}, dtype=torch.qint8)
    with torch.no_grad():
        exact, approx = linear(x), quantized(x)
        f32 = median_ms(lambda: linear(x), repeat)
        int8 = median_ms(lambda: quantized(x), repeat)
    return name, f32, int8, relative_error(approx, exact)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.quantized.engine = "fbgemm"
    g = torch.Generator().manual_seed(0)
    rows = [
        conv_row("conv 28x28 32->32", 28, 32, 32, args.repeat, g),
        conv_row("conv 14x14 32->64", 14, 32, 64, args.repeat, g),
        conv_row("conv 14x14 64->64", 14, 64, 64, args.repeat, g),
        dense_row("dense 3136->256", 3136, 256, args.repeat, g),
    ]
    print(f"torch {torch.__version__} int8 against f32, batch 500, {args.threads} thread(s), "
          f"median of {args.repeat}")
    print(f"{'layer':<24} {'f32 ms':>8} {'int8 ms':>10} {'speedup':>8} {'rel error':>10}")
    for name, f32, int8, error in rows:
        print(f"{name:<24} {f32:8.2f} {int8:10.2f} {f32 / int8:7.2f}x {error:10.4f}")


main()
