"""The table bench/mixed_precision/run.sh prints from its logs <framework>.<model>.<precision>.log
(each in `eagle train`'s format, which the PyTorch trainers print too)."""
import glob
import os
import re
import sys

PRECISIONS = ["float32", "mixed_bfloat16", "mixed_float16"]


def parse(path):
    text = open(path).read()
    rate = re.search(r"^trained \d+ epoch\(s\) in [\d.]+ s: (\d+) samples/s", text, re.M)
    accuracy = re.findall(r"^  test accuracy ([\d.]+)", text, re.M)
    skipped = re.findall(r"^  loss scale (\S+), (\d+) step", text, re.M)
    return (float(rate.group(1)) if rate else None, float(accuracy[-1]) if accuracy else None,
            skipped[-1] if skipped else None)


def main():
    runs = {}
    for path in glob.glob(os.path.join(sys.argv[1], "*.log")):
        fw, model, precision = os.path.basename(path)[:-4].split(".")
        runs[fw, model, precision] = parse(path)
    models = sorted({m for _, m, _ in runs}, key=lambda m: ["seed", "mlp512", "cnn"].index(m))
    print(f"{'model':<8} {'precision':<15} {'framework':<9} {'samples/s':>10} {'x float32':>9} "
          f"{'test acc':>8} {'acc - f32':>9} {'eagle/torch':>11}  loss scale")
    for model in models:
        for precision in PRECISIONS:
            for fw in ("eagle", "torch"):
                if (fw, model, precision) not in runs:
                    continue
                rate, acc, scale = runs[fw, model, precision]
                base_rate, base_acc, _ = runs.get((fw, model, "float32"), (None, None, None))
                speedup = f"{rate / base_rate:.2f}x" if rate and base_rate else ""
                delta = f"{100 * (acc - base_acc):+.2f}" if acc is not None and base_acc else ""
                other = runs.get(("torch", model, precision), (None,))[0]
                ratio = f"{rate / other:.2f}x" if fw == "eagle" and rate and other else ""
                print(f"{model:<8} {precision:<15} {fw:<9} "
                      f"{rate if rate else 'failed':>10} {speedup:>9} "
                      f"{acc if acc is not None else '-':>8} {delta:>9} {ratio:>11}  "
                      f"{'%s, %s skipped' % scale if scale else ''}")
        print()
    print("x float32: samples/s over the same framework's float32 run; acc - f32: test accuracy\n"
          "points over float32; eagle/torch: Eagle's samples/s over PyTorch's at that precision.")


if __name__ == "__main__":
    main()
