"""Interop with TensorBoard's event-file readers (PyPI `tensorboard`, no TensorFlow needed).

    check_tensorboard.py LOGDIR EVENT_FILE

checks the event file that tests/interop/eagle_summary_demo.c wrote into LOGDIR (its values are
mirrored below):
  - TensorBoard's own TFRecord reader reads every record, CRCs included, to a clean end of file;
  - every record parses as a tensorflow.Event and re-serializes to exactly the bytes eagle wrote;
  - the first event is file_version "brain.Event:2";
  - event_accumulator.EventAccumulator (the classic API) finds the scalar tags, steps and values
    and the histograms' num, min, max, sum, sum_squares and buckets (recomputed here with
    TensorFlow's default bucket edges, as tf.compat.v1.summary.histogram would);
  - plugin_event_accumulator.EventAccumulator (what the TensorBoard server uses) sees the same
    scalars through the "scalars" plugin and the histograms through the "histograms" plugin.
"""

import math
import os
import struct
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
from tensorboard.util import tensor_util

from spec import Failures

f32 = lambda x: float(np.float32(x))  # noqa: E731

# What eagle_summary_demo writes.
SCALARS = {
    "train/loss": [(step, f32(1.0 / (step + 1))) for step in range(10)],
    "train/accuracy": [(step, step / 8.0) for step in range(10)],
    "lr": [(123456789012, f32(0.001))],
}
KERNEL = [(i - 12) / 4.0 for i in range(30)]
HISTOGRAMS = {
    "dense/kernel": [(3, KERNEL), (7, [2 * v for v in KERNEL])],
    "dense/bias": [(3, [0.5, 1.5, 1.5, 1e-13, -7e5])],
}


def default_bucket_limits():
    """tensorflow/core/lib/histogram/histogram.cc: InitDefaultBuckets."""
    positive = []
    v = 1e-12
    while v < 1e20:
        positive.append(v)
        v *= 1.1
    positive.append(sys.float_info.max)
    return [-x for x in reversed(positive)] + [0.0] + positive


LIMITS = default_bucket_limits()


def tf_histogram(values):
    """Histogram::Add for each value, then EncodeToProto(preserve_zero_buckets=False)."""
    import bisect

    counts = [0.0] * len(LIMITS)
    for v in values:
        counts[min(bisect.bisect_right(LIMITS, v), len(LIMITS) - 1)] += 1
    limits, buckets = [], []
    i = 0
    while i < len(counts):
        end, count = LIMITS[i], counts[i]
        j = i + 1
        while j < len(counts) and counts[j] == 0:
            end = LIMITS[j]
            j += 1
        if count > 0:
            limits.append(end)
            buckets.append(count)
        i = j
    if not buckets:
        limits, buckets = [sys.float_info.max], [0.0]
    return dict(
        min=min(values),
        max=max(values),
        num=float(len(values)),
        sum=math.fsum(values),
        sum_squares=math.fsum(v * v for v in values),
        bucket_limit=limits,
        bucket=buckets,
    )


def read_records(path, failures):
    """Every record's bytes, read with TensorBoard's reader (which checks both CRCs)."""
    reader = PyRecordReader_New(path)
    records = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError as e:
            failures.check(False, f"record {len(records)}: {e}")
            break
        records.append(reader.record())
    return records


def check_records(path, failures):
    records = read_records(path, failures)
    expected_count = 1 + sum(map(len, SCALARS.values())) + sum(map(len, HISTOGRAMS.values()))
    failures.check(len(records) == expected_count, f"{len(records)} records, expected {expected_count}")
    events = []
    for i, record in enumerate(records):
        event = event_pb2.Event.FromString(record)
        events.append(event)
        failures.check(
            event.SerializeToString() == record,
            f"record {i}: protobuf re-serializes to other bytes:\n  {event.SerializeToString()!r}\n"
            f"  {record!r}",
        )
        failures.check(abs(event.wall_time - os.path.getmtime(path)) < 600, f"record {i}: wall_time")
    if events:
        failures.check(events[0].file_version == "brain.Event:2", f"first event: {events[0]}")
        failures.check(not events[0].HasField("summary"), "first event has a summary")
    for event in events[1:]:
        failures.check(len(event.summary.value) == 1, f"event has {len(event.summary.value)} values")


def check_event_accumulator(logdir, failures):
    acc = ea.EventAccumulator(
        logdir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.COMPRESSED_HISTOGRAMS: 0}
    )
    acc.Reload()
    failures.check(acc.file_version == 2.0, f"file_version {acc.file_version}")
    tags = acc.Tags()
    failures.check(sorted(tags[ea.SCALARS]) == sorted(SCALARS), f"scalar tags {tags[ea.SCALARS]}")
    failures.check(
        sorted(tags[ea.HISTOGRAMS]) == sorted(HISTOGRAMS), f"histogram tags {tags[ea.HISTOGRAMS]}"
    )
    for tag, want in SCALARS.items():
        if tag not in tags[ea.SCALARS]:
            continue
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        failures.check(got == want, f"scalars {tag}: {got}, expected {want}")
    for tag, want in HISTOGRAMS.items():
        if tag not in tags[ea.HISTOGRAMS]:
            continue
        got = acc.Histograms(tag)
        failures.check([e.step for e in got] == [s for s, _ in want], f"histogram {tag} steps")
        for event, (step, values) in zip(got, want):
            h, w = event.histogram_value, tf_histogram(values)
            for field in ("num", "min", "max", "sum", "sum_squares"):
                failures.check(
                    getattr(h, field) == w[field],
                    f"histogram {tag} step {step}: {field} {getattr(h, field)}, expected {w[field]}",
                )
            failures.check(
                list(h.bucket_limit) == w["bucket_limit"] and list(h.bucket) == w["bucket"],
                f"histogram {tag} step {step}: buckets {list(zip(h.bucket_limit, h.bucket))}, "
                f"expected {list(zip(w['bucket_limit'], w['bucket']))}",
            )
        compressed = acc.CompressedHistograms(tag)
        failures.check(len(compressed) == len(want), f"compressed histograms of {tag}")


def check_plugin_event_accumulator(logdir, failures):
    acc = pea.EventAccumulator(logdir, size_guidance={pea.TENSORS: 0})
    acc.Reload()
    tensors = acc.Tags()[pea.TENSORS]
    failures.check(
        sorted(tensors) == sorted(list(SCALARS) + list(HISTOGRAMS)), f"plugin tags {tensors}"
    )
    for tag, want in SCALARS.items():
        if tag not in tensors:
            continue
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        failures.check(plugin == "scalars", f"{tag}: plugin {plugin!r}")
        got = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
        failures.check(got == want, f"plugin scalars {tag}: {got}, expected {want}")
    for tag, want in HISTOGRAMS.items():
        if tag not in tensors:
            continue
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        failures.check(plugin == "histograms", f"{tag}: plugin {plugin!r}")
        for event, (step, values) in zip(acc.Tensors(tag), want):
            buckets = tensor_util.make_ndarray(event.tensor_proto)  # (k, 3): left, right, count
            failures.check(
                event.step == step and buckets.ndim == 2 and buckets.shape[1] == 3,
                f"plugin histogram {tag}: step {event.step}, shape {buckets.shape}",
            )
            if buckets.ndim == 2 and buckets.shape[1] == 3:
                failures.check(
                    buckets[:, 2].sum() == len(values), f"plugin histogram {tag}: counts {buckets}"
                )


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    logdir, path = sys.argv[1], sys.argv[2]
    failures = Failures("check_tensorboard.py")
    name = os.path.basename(path)
    failures.check(
        name.startswith("events.out.tfevents.") and name.endswith(".eagle"), f"file name {name}"
    )
    check_records(path, failures)
    check_event_accumulator(logdir, failures)
    check_plugin_event_accumulator(logdir, failures)
    failures.finish()


if __name__ == "__main__":
    main()
