"""tf.data peer of `bench_pipeline synthetic`: range(N) -> map(~WORK_US of work per element,
num_parallel_calls=AUTOTUNE or fixed) -> prefetch(AUTOTUNE), consumed by a loop that does nothing
else. Elements per second, median of ROUNDS passes (configurations interleaved round by round).

The work, two ways:
  - "tf op": a pure-TF op (a chain of square matmuls) whose length is calibrated at start so that
    one call takes about WORK_US of CPU time (see calibrate); TensorFlow runs with intra-op
    parallelism 1 so that, like Eagle's map calls, each call uses one core.
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


def eager_cpu_us(m, calls=300):
    """Thread CPU time of one eager matmul m @ m (run in this thread: intra-op parallelism is 1),
    the least of a few tries."""
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        for _ in range(calls):
            tf.matmul(m, m)
        best = min(best, (time.thread_time() - start) / calls * 1e6)
    return best


def calibrate():
    """How many SIZE x SIZE matmuls make WORK_US of CPU work: the CPU time of an eager matmul
    minus that of a 2x2 one (the eager dispatch, which tf.data's graph does not pay), measured in
    this thread. The largest size that still takes 3 matmuls or more (fewer ops: less per-op
    overhead in the graph)."""
    small = eager_cpu_us(tf.random.stateless_uniform((2, 2), seed=(1, 2)))
    for size in (128, 96, 64, 32):
        big = tf.random.stateless_uniform((size, size), seed=(1, 2))
        per_matmul = max(eager_cpu_us(big) - small, 1.0)
        repeats = max(1, round(WORK_US / per_matmul))
        if repeats >= 3:
            break
    return size, repeats, repeats * per_matmul


def main():
    tf.config.threading.set_inter_op_parallelism_threads(os.cpu_count())
    tf.config.threading.set_intra_op_parallelism_threads(1)
    size, repeats, work_us = calibrate()
    op = make_op(size, repeats)
    configs = [("tf.data AUTOTUNE (tf op)", op, tf.data.AUTOTUNE)]
    configs += [(f"tf.data fixed {p} (tf op)", op, p) for p in (1, 2, 3, 4)]
    configs += [("tf.data sequential (tf op)", op, None)]
    configs += [("tf.data AUTOTUNE (py_function)", py_work, tf.data.AUTOTUNE)]
    configs += [("tf.data AUTOTUNE, no work", lambda x: x, tf.data.AUTOTUNE)]
    datasets = [(name, dataset(fn, p)) for name, fn, p in configs]
    for _, ds in datasets:
        rate(ds)  # trace every function once
    rates = {name: [] for name, _ in datasets}
    for _ in range(ROUNDS):
        for name, ds in datasets:
            rates[name].append(rate(ds))
    print(f"# tf {tf.__version__}: {size}x{size} matmul x{repeats} = {work_us:.0f} us of CPU work "
          f"per element, median of {ROUNDS} rounds")
    for name, _ in datasets:
        print(f"{name:<32} {statistics.median(rates[name]):10.0f}")


if __name__ == "__main__":
    main()
