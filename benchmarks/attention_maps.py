"""Seconds a model's `attention_weights` takes for the attention maps a
translation task draws at each evaluation (3 sentences, `--attention-plots`'
default): the steps run eagerly one by one (`Decoder.attention_by_steps`,
what kseq did before) against the traced loop kseq runs now, in one process.

Models of the quick preset's translation shape: the Transformer (2 + 2
layers, d_model 192, 4 heads, feed-forward 768, 4,000 ids) and the recurrent
translator (one LSTM layer of 256, Luong's concat attention), untrained, on 3
random sentences of 35 source and 40 target tokens. Reported: the traced
loop's first call (its trace) and the median of its next calls, and the
eager loop's median; the values are checked equal.

    .venv/bin/python benchmarks/attention_maps.py --policy mixed_bfloat16
"""

import argparse
import json
import statistics
import time

import numpy as np


def timed(call, repeats):
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = np.asarray(call())
        seconds.append(time.perf_counter() - start)
    return seconds, result


def measure(name, model, repeats):
    import tensorflow as tf

    from kseq.decoding.protocol import Decoder

    rng = np.random.default_rng(0)
    batch = {"source_ids": rng.integers(4, 4000, (3, 35)).astype("int32"),
             "target_ids": rng.integers(4, 4000, (3, 40)).astype("int32")}
    batch["target_ids"][:, 0] = 1
    model(batch)
    traced, weights = timed(lambda: model.attention_weights(batch), repeats + 1)
    source, target = tf.constant(batch["source_ids"]), tf.constant(batch["target_ids"])
    eager, expected = timed(lambda: Decoder.attention_by_steps(model, source, target), repeats)
    return dict(model=name, traced_first_s=round(traced[0], 3), traced_s=round(statistics.median(traced[1:]), 4),
                eager_s=round(statistics.median(eager), 3), equal=bool(np.array_equal(weights, expected)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="float32", help="keras dtype policy (default float32)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import keras

    from kseq.models import RNNSeq2Seq, TransformerSeq2Seq

    keras.mixed_precision.set_global_policy(args.policy)
    models = {
        "transformer": lambda: TransformerSeq2Seq(4000, 4000, num_layers=2, d_model=192, num_heads=4, ff_dim=768,
                                                  share_embeddings=True, max_length=256),
        "lstm-concat": lambda: RNNSeq2Seq(4000, 4000, embed_dim=256, units=256, cell="lstm", attention="concat"),
    }
    for name, make in models.items():
        print(json.dumps({"policy": args.policy, **measure(name, make(), args.repeats)}), flush=True)


if __name__ == "__main__":
    main()
