"""The table run.sh prints, from the logs it left: <framework>.<config>.<model>.<run>.log, the
trainer's stdout and stderr in `eagle train`'s format (torch_ddp.py prints the same lines). Per
model: each configuration's samples/s (the median over its runs, with the range when there are
several) and last test accuracy, then the ratios issue 21 asks for, with their goals."""
import glob
import os
import re
import statistics
import sys

CONFIGS = [  # (name, label), in table order
    ("eagle.1x1", "eagle 1 process x 1 thread"),
    ("eagle.1x2", "eagle 1 process x 2 threads"),
    ("eagle.2x1", "eagle 2 processes x 1 thread (MPI)"),
    ("eagle.mirrored2", "eagle mirrored, 2 CPU devices x 1 thread"),
    ("torch.1x1", "torch 1 process x 1 thread"),
    ("torch.1x2", "torch 1 process x 2 threads"),
    ("torch.2x1", "torch DDP 2 processes x 1 thread (gloo)"),
]
RATIOS = [  # (numerator, denominator, goal or None)
    ("eagle.2x1", "eagle.1x1", 1.8),
    ("eagle.2x1", "torch.2x1", 2.0),
    ("eagle.2x1", "eagle.1x2", None),
    ("eagle.mirrored2", "eagle.1x1", None),
    ("torch.2x1", "torch.1x1", None),
]
MODELS = {"mlp": "wide MLP 784-512-512-10", "cnn": "CNN (eagle train --model cnn)"}


def parse(log):
    """(samples/s or None, last test accuracy or None) of one run."""
    text = open(log, errors="replace").read()
    total = re.search(r"^trained \d+ epoch\(s\) in [\d.]+ s: (\d+) samples/s", text, re.M)
    accuracy = re.findall(r"^\s*test accuracy ([\d.]+)", text, re.M)
    return (float(total.group(1)) if total else None,
            float(accuracy[-1]) if accuracy else None)


def main():
    directory = sys.argv[1]
    runs = {}  # (config, model) -> [(rate, accuracy)]
    for log in sorted(glob.glob(os.path.join(directory, "*.log"))):
        parts = os.path.basename(log)[:-4].split(".")
        if len(parts) != 4:
            continue
        config, model = ".".join(parts[:2]), parts[2]
        runs.setdefault((config, model), []).append(parse(log))
    about = os.path.join(directory, "about")
    if os.path.exists(about):
        print(open(about).read().rstrip())
    models = [m for m in MODELS if any(key[1] == m for key in runs)]
    for model in models:
        print(f"\n{MODELS[model]}")
        print(f"  {'configuration':<42} {'samples/s':>10} {'range':>15} {'test acc':>8}")
        median = {}
        for config, label in CONFIGS:
            results = runs.get((config, model))
            if not results:
                continue
            rates = [r for r, _ in results if r is not None]
            accuracies = [a for _, a in results if a is not None]
            if rates:
                median[config] = statistics.median(rates)
                rate = f"{median[config]:.0f}"
                spread = f"{min(rates):.0f}-{max(rates):.0f}" if len(rates) > 1 else ""
            else:
                rate, spread = "failed", ""
            failed = len(results) - len(rates)
            if failed and rates:
                spread += f" ({failed} failed)"
            accuracy = f"{accuracies[-1]:.4f}" if accuracies else "-"
            print(f"  {label:<42} {rate:>10} {spread:>15} {accuracy:>8}")
        print()
        for numerator, denominator, goal in RATIOS:
            if numerator not in median or denominator not in median:
                continue
            ratio = median[numerator] / median[denominator]
            verdict = ""
            if goal is not None:
                verdict = f"  (goal >= {goal}: {'met' if ratio >= goal else 'NOT met'})"
            print(f"  {numerator} / {denominator}: {ratio:.2f}x{verdict}")
    if not models:
        print("no logs found in", directory)
        return 1
    print("\nPxT: P processes x T threads each; samples/s: global training examples per second "
          "of the training steps\n(no loading, shuffling or evaluation); the median of the runs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
