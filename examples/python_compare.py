"""Checks Eagle's predictions in Python: loads the weights and the batch that
examples/python_compare.c saved (safetensors files), recomputes the MLP's forward pass with
numpy, and compares it with Eagle's logits.

    python3 examples/python_compare.py [directory]    (default ".")

Needs numpy and safetensors (pip install numpy safetensors). Exits 0 when the largest absolute
difference is below 1e-5 and both predict the same classes, 1 otherwise.
"""
import os
import sys

import numpy as np
from safetensors.numpy import load_file

TOLERANCE = 1e-5


def forward(weights, images):
    """Flatten -> Dense(64, relu) -> Dense(10), as eg_dense computes it: x @ kernel + bias,
    the kernel stored (inputs, units) as in Keras."""
    x = images.reshape(images.shape[0], -1)
    h = np.maximum(x @ weights["dense/kernel"] + weights["dense/bias"], 0)
    return h @ weights["dense_1/kernel"] + weights["dense_1/bias"]


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "."
    weights = load_file(os.path.join(directory, "python_compare_weights.safetensors"))
    batch = load_file(os.path.join(directory, "python_compare_batch.safetensors"))
    for name, value in sorted(weights.items()):
        print(f"{name:16} {value.dtype} {value.shape}")
    logits = forward(weights, batch["images"])
    eagle_logits = batch["logits"]
    difference = float(np.max(np.abs(logits - eagle_logits)))
    same_classes = bool(np.all(logits.argmax(1) == eagle_logits.argmax(1)))
    accuracy = float(np.mean(eagle_logits.argmax(1) == batch["labels"]))
    print(f"{len(logits)} images: max |numpy - eagle| = {difference:.3g}, "
          f"same predicted classes: {same_classes}, accuracy {accuracy:.3f}")
    if difference < TOLERANCE and same_classes:
        print("python_compare: numpy agrees with Eagle")
        return 0
    print(f"python_compare: FAILED: numpy and Eagle differ (tolerance {TOLERANCE})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
