"""Loss and gradient over the logits of one training batch, three ways.

kseq's `MaskedSparseCategoricalCrossentropy` (`smoothed_cross_entropy`:
log-normaliser, label logit and mean logit, with its own gradient) against,
measured in the same process:
- TensorFlow's fused softmax cross-entropy kernels, which kseq used until
  2026-11-24 (the dense kernel with a (B, T, V) smoothed one-hot target;
  the sparse kernel without smoothing);
- the log-softmax + `take_along_axis` formulation kseq used before that
  (its gradient scatters back into a (B, T, V) tensor);
- keras' `SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)`
  (no label smoothing, so compared at smoothing 0).

Each: value and gradient with respect to (B, T, V) float32 logits in one
`tf.function`, with and without XLA, median of --repeats calls after a
warm-up. The default shape is a training batch of the translation quick
preset (64 x 40 tokens, 4,000 ids).

    .venv/bin/python benchmarks/loss.py    # about 1 minute
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kseq.training.devices.runtime import tune_cpu_runtime  # noqa: E402

tune_cpu_runtime()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy  # noqa: E402


def gather_formulation(smoothing):
    """The earlier kseq loss: log-softmax, then the label's entry."""
    def loss(labels, logits):
        log_probs = ops.log_softmax(logits, axis=-1)
        picked = ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1)[..., 0]
        losses = (1 - smoothing) * -picked + smoothing * -ops.mean(log_probs, axis=-1)
        weights = ops.cast(labels != 0, "float32")
        return ops.sum(losses * weights) / ops.sum(weights)
    return loss


def fused_kernel_formulation(smoothing):
    """TensorFlow's fused kernels, as kseq's loss used them until 2026-11-24."""
    def loss(labels, logits):
        if smoothing:
            vocab = logits.shape[-1]
            targets = tf.one_hot(labels, vocab, on_value=1 - smoothing + smoothing / vocab,
                                 off_value=smoothing / vocab)
            losses = tf.nn.softmax_cross_entropy_with_logits(targets, logits)
        else:
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        weights = ops.cast(labels != 0, "float32")
        return ops.sum(losses * weights) / ops.sum(weights)
    return loss


def median_ms(loss, labels, logits, jit, repeats):
    @tf.function(jit_compile=jit)
    def value_and_gradient():
        with tf.GradientTape() as tape:
            value = loss(labels, logits)
        return value, tape.gradient(value, logits)

    value, _ = value_and_gradient()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        _, gradient = value_and_gradient()
        gradient.numpy()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times), float(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[64, 40, 4000], metavar=("B", "T", "V"))
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    batch, length, vocab = args.shape
    rng = tf.random.Generator.from_seed(0)
    logits = tf.Variable(rng.normal((batch, length, vocab)))
    labels = rng.uniform((batch, length), 0, vocab, tf.int32)  # id 0 (PAD) about 1 in V
    print(f"logits {batch} x {length} x {vocab}, float32; median of {args.repeats} calls, ms")
    print("| loss | smoothing | graph ms | XLA ms | value |")
    print("|---|---|---|---|---|")
    candidates = [
        ("kseq MaskedSparseCategoricalCrossentropy", 0.1, MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)),
        ("TensorFlow's fused kernels (kseq until 2026-11-24)", 0.1, fused_kernel_formulation(0.1)),
        ("log-softmax + take_along_axis (kseq before that)", 0.1, gather_formulation(0.1)),
        ("kseq MaskedSparseCategoricalCrossentropy", 0.0, MaskedSparseCategoricalCrossentropy()),
        ("TensorFlow's fused kernels (kseq until 2026-11-24)", 0.0, fused_kernel_formulation(0.0)),
        ("log-softmax + take_along_axis (kseq before that)", 0.0, gather_formulation(0.0)),
        ("keras SparseCategoricalCrossentropy(ignore_class=0)", 0.0,
         keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)),
    ]
    for name, smoothing, loss in candidates:
        graph, value = median_ms(loss, labels, logits, False, args.repeats)
        xla, _ = median_ms(loss, labels, logits, True, args.repeats)
        print(f"| {name} | {smoothing} | {graph:.1f} | {xla:.1f} | {value:.4f} |", flush=True)


if __name__ == "__main__":
    main()
