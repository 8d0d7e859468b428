"""tf.data peer of `bench_pipeline synthetic`: range(N) -> map(~WORK_US of work per element,
num_parallel_calls=AUTOTUNE or fixed) -> prefetch(AUTOTUNE), consumed by a loop that does nothing
else. Elements per second, median of ROUNDS passes (configurations interleaved round by round).

The work, two ways:
  - "tf op": a pure-TF op (a chain of small matmuls) whose size is calibrated at start so that one
    call takes WORK_US of CPU time when run alone; tf.data runs it with max_intra_op_parallelism 1
    so that, like Eagle's map calls, each call uses one core.
  - "py_function": a Python loop spinning until WORK_US of thread CPU time have passed, through
    tf.py_function (holds the GIL, so parallel calls cannot overlap: tf.data's usual trap).
One line per configuration: "name elements_per_second".

    python tf_pipeline.py [ELEMENTS] [ROUNDS] [WORK_US]
"""
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

ELEMENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
WORK_US = float(sys.argv[3]) if len(sys.argv) > 3 else 200.0


def make_op(size, repeats):
    m = tf.random.stateless_uniform((size, size), seed=(1, 2)) * 0.01

    def work(x):
        y = m
        for _ in range(repeats):
            y = tf.matmul(y, m)
        return x + tf.cast(tf.reduce_sum(y) * 0.0, tf.int64)

    return work


def py_spin(x):
    start = time.thread_time()
    while (time.thread_time() - start) * 1e6 < WORK_US:
        pass
    return x


def py_work(x):
    return tf.py_function(py_spin, [x], tf.int64)


def options():
    o = tf.data.Options()
    o.threading.max_intra_op_parallelism = 1
    return o


def dataset(fn, parallel, n=ELEMENTS):
    ds = tf.data.Dataset.range(n)
    ds = ds.map(fn, num_parallel_calls=parallel)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options())


def rate(ds):
    start = time.perf_counter()
    n = 0
    for _ in ds:
        n += 1
    return n / (time.perf_counter() - start)


def calibrate():
    """The matmul chain whose sequential pass costs about WORK_US of CPU per element."""
    size, repeats = 32, 1
    for _ in range(12):
        ds = dataset(make_op(size, repeats), None, 400)
        rate(ds)  # trace and warm up
        cpu = time.process_time()
        r = rate(ds)
        per_element_cpu = (time.process_time() - cpu) / 400 * 1e6
        per_element_wall = 1e6 / r
        if abs(per_element_cpu - WORK_US) < 0.1 * WORK_US:
            break
        repeats = max(1, round(repeats * WORK_US / per_element_cpu))
        if repeats > 16:
            size, repeats = size * 2, max(1, repeats // 8)
    return size, repeats, per_element_cpu, per_element_wall


def main():
    tf.config.threading.set_inter_op_parallelism_threads(os.cpu_count())
    size, repeats, cpu_us, wall_us = calibrate()
    op = make_op(size, repeats)
    configs = [("tf.data AUTOTUNE (tf op)", op, tf.data.AUTOTUNE)]
    configs += [(f"tf.data fixed {p} (tf op)", op, p) for p in (1, 2, 3, 4)]
    configs += [("tf.data sequential (tf op)", op, None)]
    configs += [("tf.data AUTOTUNE (py_function)", py_work, tf.data.AUTOTUNE)]
    datasets = [(name, dataset(fn, p)) for name, fn, p in configs]
    for _, ds in datasets:
        rate(ds)  # trace every function once
    rates = {name: [] for name, _ in datasets}
    for _ in range(ROUNDS):
        for name, ds in datasets:
            rates[name].append(rate(ds))
    print(f"# tf {tf.__version__}: {size}x{size} matmul x{repeats} = {cpu_us:.0f} us CPU "
          f"({wall_us:.0f} us wall) per element alone, median of {ROUNDS} rounds")
    for name, _ in datasets:
        print(f"{name:<32} {statistics.median(rates[name]):10.0f}")


if __name__ == "__main__":
    main()
