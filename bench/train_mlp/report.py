"""The table run.sh prints, from the logs it left: <framework>.<hidden>.<batch>.<threads>.log (the
trainer's stdout and stderr, in `eagle train`'s format) and .time (/usr/bin/time -v)."""
import glob
import os
import re
import sys

ORDER = {"eagle": 0, "torch": 1, "tf": 2, "tf.function": 3}
LABEL = {"eagle": "eagle", "torch": "torch eager", "tf": "tf eager",
         "tf.function": "tf.function (graph)"}


def parse(log, time_file):
    text = open(log).read()
    total = re.search(r"^trained \d+ epoch\(s\) in [\d.]+ s: (\d+) samples/s", text, re.M)
    accuracy = [float(a) for a in re.findall(r"^  test accuracy ([\d.]+)", text, re.M)]
    rss = None
    if os.path.exists(time_file):
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(time_file).read())
        rss = int(m.group(1)) / 1024 if m else None
    return {"rate": float(total.group(1)) if total else None, "rss": rss,
            "acc1": accuracy[0] if accuracy else None,
            "acc_last": accuracy[-1] if accuracy else None}


def main():
    rows = []
    for log in glob.glob(os.path.join(sys.argv[1], "*.log")):
        fw, hidden, batch, threads = os.path.basename(log)[:-4].rsplit(".", 3)
        rows.append((fw, hidden, int(batch), int(threads), parse(log, log[:-4] + ".time")))
    rows.sort(key=lambda r: (len(r[1]), r[1], r[3], ORDER[r[0]]))
    eagle = {(h, b, t): r["rate"] for fw, h, b, t, r in rows if fw == "eagle"}

    def fmt(v, spec):
        return format(v, spec) if v is not None else "failed"

    print(f"{'framework':<20} {'model':<16} {'batch':>5} {'thr':>3} {'samples/s':>10} "
          f"{'peak RSS MiB':>12} {'acc ep1':>8} {'acc last':>8} {'eagle/this':>10}")
    previous = None
    for fw, hidden, batch, threads, r in rows:
        if previous and previous != (hidden, threads):
            print()
        previous = (hidden, threads)
        e = eagle.get((hidden, batch, threads))
        ratio = (f"{e / r['rate']:.2f}x" if fw != "eagle" and e and r["rate"] else "")
        model = "784-" + hidden.replace(",", "-") + "-10"
        print(f"{LABEL[fw]:<20} {model:<16} {batch:>5} {threads:>3} {fmt(r['rate'], '.0f'):>10} "
              f"{fmt(r['rss'], '.0f'):>12} {fmt(r['acc1'], '.4f'):>8} "
              f"{fmt(r['acc_last'], '.4f'):>8} {ratio:>10}")
    print("eagle/this: Eagle's samples/s over this row's (same model, batch and threads), i.e.\n"
          "eagle/torch on the torch rows and eagle/tf on the tf rows.")


if __name__ == "__main__":
    main()
