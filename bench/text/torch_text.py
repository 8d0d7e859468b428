"""PyTorch's side of bench/text (run.sh): the models text_bench.c trains, on the same windows of
the same text (text_bench --dump-text writes it; the offsets come from splitmix64 as in
text_bench.c), printing text_bench's lines.
  torch_text.py --text FILE --model lstm|transformer [--threads N] [--steps N] [--warmup N]
                [--repeat N] [--batch N] [--seq-len N] [--learning-rate X] [--seed N]
  torch_text.py --attention-memory naive|sdpa [--length T]
The transformer is nn.TransformerEncoderLayer (post-LN, ReLU, dropout 0) with a causal mask passed
with is_causal=True, so that attention runs in F.scaled_dot_product_attention's causal kernels."""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

VOCAB = 256
MASK64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


class Windows:
    """text_bench.c's batches: each row a window at an offset drawn by splitmix64, and the FNV-1a
    hash of every offset drawn."""

    def __init__(self, text, batch, seq_len, seed):
        self.text, self.batch, self.seq_len = text, batch, seq_len
        self.state, self.hash = seed, 0xCBF29CE484222325
        self.span = len(text) - seq_len - 1
        self.columns = np.arange(seq_len + 1)

    def next(self):
        offsets = []
        for _ in range(self.batch):
            self.state, z = splitmix64(self.state)
            offsets.append(z % self.span)
            self.hash = ((self.hash ^ offsets[-1]) * 0x100000001B3) & MASK64
        rows = torch.from_numpy(self.text[np.array(offsets)[:, None] + self.columns].astype(np.int64))
        return rows[:, :-1], rows[:, 1:]


class LSTMLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, 64)
        self.lstm = torch.nn.LSTM(64, 512, batch_first=True)
        self.output = torch.nn.Linear(512, VOCAB)

    def forward(self, x):
        return self.output(self.lstm(self.embedding(x))[0])


class TransformerLM(torch.nn.Module):
    def __init__(self, seq_len, width=256, blocks=4, heads=4, ffn=1024):
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, width)
        self.position = torch.nn.Parameter(torch.empty(seq_len, width))
        torch.nn.init.xavier_uniform_(self.position)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0, batch_first=True,
                                             norm_first=False, layer_norm_eps=1e-5)
            for _ in range(blocks))
        self.output = torch.nn.Linear(width, VOCAB)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq_len),
                             persistent=False)

    def forward(self, x):
        t = x.shape[1]
        h = self.embedding(x) + self.position[:t]
        for block in self.blocks:
            h = block(h, src_mask=self.mask[:t, :t], is_causal=True)
        return self.output(h)


def train(args):
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    text = np.fromfile(args.text, dtype=np.uint8)
    model = LSTMLM() if args.model == "lstm" else TransformerLM(args.seq_len)
    lr = args.learning_rate or (2e-3 if args.model == "lstm" else 1e-3)
    params = list(model.parameters())
    adam = torch.optim.Adam(params, lr=lr, eps=1e-7)
    windows = Windows(text, args.batch, args.seq_len, args.seed)
    model.train()

    # --precision bf16: autocast, PyTorch's mixed precision (products in bf16, the loss in f32),
    # beside Eagle's mixed_bfloat16 policy
    low = args.precision == "bf16"
    name = args.model + ("-bf16" if low else "")

    def step():
        x, y = windows.next()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        adam.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        adam.step()
        return loss.item()

    print(f"torch {torch.__version__} {args.model}, {torch.get_num_threads()} thread(s), "
          f"{sum(p.numel() for p in params)} parameters", flush=True)
    for _ in range(args.warmup):
        step()
    for r in range(args.repeat):
        wall, cpu, total = time.perf_counter(), time.process_time(), 0.0
        for _ in range(args.steps):
            total += step()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"result framework=torch model={name} threads={torch.get_num_threads()} "
              f"batch={args.batch} seq={args.seq_len} steps={args.steps} repeat={r} "
              f"seconds={wall:.6f} cpu_seconds={cpu:.6f} "
              f"bits_per_char={total / args.steps / math.log(2):.4f}", flush=True)
    print(f"batches framework=torch model={name} threads={torch.get_num_threads()} "
          f"seed={args.seed} hash={windows.hash:016x}")


def resident_bytes():
    """VmRSS and VmHWM (the peak) from /proc/self/status, in bytes."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def attention_memory(args):
    """The resident set's peak growth over a causal forward and backward at length T (one head of
    64) beyond the inputs: the peak is reset (clear_refs 5) just before; a small call first loads
    the code paths. naive: softmax(scale q k^T masked) v with the scores materialized (the mask
    made inside, as such code does); sdpa: F.scaled_dot_product_attention(is_causal=True)."""
    torch.set_num_threads(args.threads)
    t, d = args.length, 64
    g = torch.Generator().manual_seed(args.seed)
    qkv = [torch.rand(1, 1, t, d, generator=g) * 2 - 1 for _ in range(3)]

    def naive(q, k, v):
        n = q.shape[2]
        mask = torch.ones(n, n, dtype=torch.bool).triu_(1)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        return s.masked_fill(mask, float("-inf")).softmax(-1) @ v

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    attend = naive if args.attention_memory == "naive" else sdpa
    for size in (64, t):
        inputs = [x[:, :, :size].clone().requires_grad_() for x in qkv]
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        rss, _ = resident_bytes()
        attend(*inputs).sum().backward()
        _, peak = resident_bytes()
        del inputs
    print(f"memory framework=torch method=rss_peak_{args.attention_memory} T={t} D={d} "
          f"bytes={peak - rss}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--text")
    p.add_argument("--model", choices=["lstm", "transformer"], default="lstm")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--learning-rate", type=float, default=0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--attention-memory", choices=["naive", "sdpa"])
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    p.add_argument("--length", type=int, default=4096)
    args = p.parse_args()
    if args.attention_memory:
        attention_memory(args)
    elif not args.text:
        p.error("--text FILE is required for training (text_bench --dump-text FILE writes it)")
    else:
        train(args)


if __name__ == "__main__":
    main()
