"""Decoding speed: kseq's cached searches against a naive loop and KerasHub.

For a batch of sources, times the generation of N tokens (EOS disabled, so
every method produces exactly N) with:
  (a) naive: the whole teacher-forced model re-run on the growing prefix at
      every step (what the TensorFlow tutorials do), each call a traced graph;
  (b) kseq greedy search with cached steps (tf.function);
  (c) the same compiled with XLA (jit_compile=True);
  (d) kseq beam search, beam 4, cached (tf.function), and (d') with XLA;
  (e) KerasHub TransformerEncoder/TransformerDecoder of the same size with
      its key/value caches, driven by keras_hub.samplers.GreedySampler
      (tf.function), for the Transformer only.
Models have random weights: speed does not depend on them with EOS disabled.
Each time is the median of --repeats runs after one warm-up run (tracing
and compilation excluded).

    python benchmarks/decode.py                # all lengths, both models
    python benchmarks/decode.py --lengths 32 --repeats 1
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kseq.decoding import BeamSearch, GreedySearch  # noqa: E402
from kseq.models import RNNSeq2Seq, TransformerSeq2Seq  # noqa: E402

NO_EOS = -1
TRANSFORMER = dict(num_layers=3, d_model=256, num_heads=4, ff_dim=1024)
RNN = dict(embed_dim=256, units=256, cell="lstm", attention="general")


def timed(function, repeats):
    """Median seconds of `function()`, its results read back: a GPU runs
    the ops after the call returns."""
    def run():
        keras.tree.map_structure(np.asarray, function())

    run()  # warm-up: tracing and compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def naive_loop(model, source, length):
    """The tutorial's loop: the full model on BOS + everything so far."""
    full = tf.function(
        lambda s, t: model({"source_ids": s, "target_ids": t}),
        input_signature=[tf.TensorSpec((None, None), tf.int32)] * 2,
    )

    def run():
        prefix = tf.ones((source.shape[0], 1), tf.int32)
        for _ in range(length):
            logits = full(source, prefix)[:, -1]
            next_token = tf.argmax(logits[:, 2:], -1, output_type=tf.int32) + 2
            prefix = tf.concat([prefix, next_token[:, None]], 1)
        return prefix

    return run


def kseq_search(model, source, search, jit_compile=False):
    function = tf.function(lambda s: model.search(s, search), jit_compile=jit_compile)
    return lambda: function(source)


class KerasHubTransformer:
    """The same architecture from KerasHub layers: post-norm blocks,
    token + learned position embeddings, a Dense output projection."""

    def __init__(self, vocab, max_length, num_layers, d_model, num_heads, ff_dim):
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        embedding = lambda: keras_hub.layers.TokenAndPositionEmbedding(vocab, max_length, d_model)
        self.source_embedding, self.target_embedding = embedding(), embedding()
        self.encoders = [keras_hub.layers.TransformerEncoder(ff_dim, num_heads) for _ in range(num_layers)]
        self.decoders = [keras_hub.layers.TransformerDecoder(ff_dim, num_heads) for _ in range(num_layers)]
        self.output = keras.layers.Dense(vocab)

    def generate_function(self, length):
        sampler = keras_hub.samplers.GreedySampler()

        @tf.function
        def generate(source):
            batch = tf.shape(source)[0]
            memory = self.source_embedding(source)
            for encoder in self.encoders:
                memory = encoder(memory, padding_mask=source != 0)
            shape = lambda steps: [batch, 2, steps, self.num_heads, self.head_dim]
            self_caches = [tf.zeros(shape(length + 1)) for _ in self.decoders]
            cross_caches = []
            for decoder in self.decoders:  # cross-attention keys/values, once
                _, _, cross = decoder(
                    tf.zeros([batch, 1, memory.shape[-1]]), memory,
                    self_attention_cache=tf.zeros(shape(1)), self_attention_cache_update_index=0,
                    cross_attention_cache=tf.zeros(shape(tf.shape(source)[1])),
                    cross_attention_cache_update_index=0,
                )
                cross_caches.append(cross)

            def next(prompt, cache, index):
                x = self.target_embedding(prompt[:, index - 1 : index], start_index=index - 1)
                updated = []
                for decoder, self_cache, cross_cache in zip(self.decoders, cache, cross_caches):
                    x, self_cache, _ = decoder(
                        x, memory, encoder_padding_mask=source != 0,
                        self_attention_cache=self_cache, self_attention_cache_update_index=index - 1,
                        cross_attention_cache=cross_cache, cross_attention_cache_update_index=None,
                    )
                    updated.append(self_cache)
                return self.output(x)[:, 0], None, updated

            prompt = tf.pad(tf.ones([batch, 1], tf.int32), [[0, 0], [0, length]])
            mask = tf.pad(tf.ones([batch, 1], tf.bool), [[0, 0], [0, length]])
            return sampler(next, prompt, cache=self_caches, index=1, mask=mask)[:, 1:]

        return generate


def benchmark(name, model, source, lengths, repeats, keras_hub_model=None):
    rows = []
    for length in lengths:
        row = {"model": name, "tokens": length}
        row["naive"] = timed(naive_loop(model, source, length), max(1, repeats // 3))
        row["kseq_greedy"] = timed(kseq_search(model, source, GreedySearch(length, eos_id=NO_EOS)), repeats)
        row["kseq_greedy_xla"] = timed(
            kseq_search(model, source, GreedySearch(length, eos_id=NO_EOS), jit_compile=True), repeats
        )
        row["kseq_beam4"] = timed(
            kseq_search(model, source, BeamSearch(length, beam_size=4, eos_id=NO_EOS)), repeats
        )
        row["kseq_beam4_xla"] = timed(
            kseq_search(model, source, BeamSearch(length, beam_size=4, eos_id=NO_EOS), jit_compile=True),
            repeats,
        )
        if keras_hub_model is not None:
            generate = keras_hub_model.generate_function(length)
            row["keras_hub_greedy"] = timed(lambda: generate(source), repeats)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def markdown(rows):
    columns = ["naive", "kseq_greedy", "kseq_greedy_xla", "kseq_beam4", "kseq_beam4_xla", "keras_hub_greedy"]
    lines = [
        "| model | tokens | (a) naive s | (b) kseq greedy s | (c) greedy + XLA s | (d) beam 4 s "
        "| (d') beam 4 + XLA s | (e) KerasHub greedy s | a/b | d/b | e/b |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [f"{row[c]:.3f}" if c in row else "–" for c in columns]
        ratios = [
            f"{row['naive'] / row['kseq_greedy']:.1f}×",
            f"{row['kseq_beam4'] / row['kseq_greedy']:.2f}×",
            f"{row['keras_hub_greedy'] / row['kseq_greedy']:.2f}×" if "keras_hub_greedy" in row else "–",
        ]
        lines.append(f"| {row['model']} | {row['tokens']} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["transformer", "rnn"], choices=["transformer", "rnn"])
    parser.add_argument("--output", help="also write the rows as JSON here")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    tf.get_logger().setLevel("ERROR")  # one tf.function per method is intended
    rng = np.random.default_rng(0)
    source = tf.constant(rng.integers(4, args.vocab_size, (args.batch_size, args.source_length)), tf.int32)
    max_length = max(max(args.lengths) + 1, args.source_length)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"TensorFlow {tf.__version__}, keras {keras.__version__}, keras-hub {keras_hub.__version__}")
    print(f"# batch {args.batch_size}, source length {args.source_length}, vocab {args.vocab_size}")
    rows = []
    if "transformer" in args.models:
        model = TransformerSeq2Seq(
            args.vocab_size, args.vocab_size, dropout=0.0, max_length=max_length,
            position="learned", **TRANSFORMER,
        )
        reference = KerasHubTransformer(args.vocab_size, max_length, **TRANSFORMER)
        rows += benchmark("Transformer", model, source, args.lengths, args.repeats, reference)
    if "rnn" in args.models:
        model = RNNSeq2Seq(args.vocab_size, args.vocab_size, **RNN)
        rows += benchmark("LSTM + Luong general", model, source, args.lengths, args.repeats)
    print(markdown(rows))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
