"""The tables run.sh prints, from the logs it left in the directory given: the "result", "batches"
and "memory" lines of text_bench and torch_text.py (one log per framework x model x thread count,
and one per attention-memory measurement)."""
import glob
import os
import re
import statistics
import sys

LINE = re.compile(r"^(result|batches|memory) (.*)$", re.M)
GOAL = 2.0


def step_flops(model, batch, seq):
    """A training step's multiply-adds x 2 in the matrix products (the backward's are twice the
    forward's), causal attention counted over the visible half of the scores: the same for both
    frameworks, so GFLOP/s says how near each comes to the core's peak."""
    if model.startswith("lstm"):
        e, h, v = 64, 512, 256
        forward = 2 * (4 * h * (e + h) + h * v)
    else:
        d, f, blocks, v = 256, 1024, 4, 256
        forward = blocks * 2 * (4 * d * d + 2 * d * f + d * seq) + 2 * d * v
    return 3 * forward * batch * seq


def fields(text):
    return dict(kv.split("=", 1) for kv in text.split())


def main():
    results, hashes, memory, failed = {}, {}, [], []
    for log in sorted(glob.glob(os.path.join(sys.argv[1], "*.log"))):
        lines = LINE.findall(open(log).read())
        if not lines:
            failed.append(os.path.basename(log))
        for kind, rest in lines:
            f = fields(rest)
            if kind == "result":
                key = (f["model"], int(f["threads"]), f["framework"])
                results.setdefault(key, []).append(f)
            elif kind == "batches":
                hashes[(f["model"], int(f["threads"]), f["framework"])] = f["hash"]
            else:
                memory.append(f)

    rates = {}
    print(f"{'model':<12} {'thr':>3} {'framework':<9} {'samples/s':>10} {'chars/s':>9} "
          f"{'samples/cpu-s':>13} {'GFLOP/s':>7} {'bits/char':>9} {'runs':>4} {'eagle/torch':>11}")
    previous = None
    for (model, threads, fw) in sorted(results, key=lambda k: (k[0], k[1], k[2] != "eagle")):
        runs = results[(model, threads, fw)]
        batch, seq, steps = (int(runs[0][k]) for k in ("batch", "seq", "steps"))
        rate = statistics.median(batch * steps / float(r["seconds"]) for r in runs)
        cpu_rate = statistics.median(batch * steps / float(r["cpu_seconds"]) for r in runs)
        rates[(model, threads, fw)] = rate
        ratio = ""
        eagle = rates.get((model, threads, "eagle"))
        if fw != "eagle" and eagle:
            ratio = f"{eagle / rate:.2f}x"
        if previous and previous != (model, threads):
            print()
        previous = (model, threads)
        gflops = rate / batch * step_flops(model, batch, seq) / 1e9
        print(f"{model:<12} {threads:>3} {fw:<9} {rate:>10.1f} {rate * seq:>9.0f} {cpu_rate:>13.1f} "
              f"{gflops:>7.1f} {float(runs[-1]['bits_per_char']):>9.3f} {len(runs):>4} {ratio:>11}")
    print("samples/s and samples/cpu-s: medians over the runs (each a timed stretch of steps after "
          "the warm-up);\nchars/s = samples/s x sequence length; GFLOP/s: the matrix products' "
          "(step_flops) per second;\nbits/char: the training loss "
          "over the last run's steps;\neagle/torch: Eagle's samples/s over PyTorch's (the goal: "
          f">= {GOAL:.0f}x).")
    for (model, threads, fw) in sorted(rates):
        if fw == "torch" and (model, threads, "eagle") in rates:
            ratio = rates[(model, threads, "eagle")] / rates[(model, threads, fw)]
            verdict = "met" if ratio >= GOAL else "not met"
            print(f"goal {model}, {threads} thread(s): {ratio:.2f}x, {verdict}")
    for (model, threads, fw), h in sorted(hashes.items()):
        other = hashes.get((model, threads, "torch"))
        if fw == "eagle" and other and other != h:
            print(f"WARNING: {model}, {threads} thread(s): the frameworks' batches differ "
                  f"({h} vs {other})")

    if memory:
        t = int(memory[0]["T"])
        scores = t * t * 4
        labels = {"allocator_peak": "Eagle's allocator: peak beyond the inputs",
                  "rss_peak": "resident set: peak growth",
                  "rss_peak_naive": "resident set: peak growth, naive softmax(QK^T)V",
                  "rss_peak_sdpa": "resident set: peak growth, F.scaled_dot_product_attention"}
        print(f"\ncausal attention forward+backward, T={t}, one head of {memory[0]['D']} "
              f"(f32 score matrix: {scores / 2**20:.0f} MiB)")
        for m in memory:
            b = float(m["bytes"])
            print(f"  {m['framework']:<6} {labels.get(m['method'], m['method']):<58} "
                  f"{b / 2**20:8.2f} MiB {100 * b / scores:6.1f}%")
    for name in failed:
        print(f"WARNING: {name} has no result (the run failed; see the log)")


if __name__ == "__main__":
    main()
