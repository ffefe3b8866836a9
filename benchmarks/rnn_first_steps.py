"""The translation recipe's RNN translator over its first training steps:
the training loss every 50 steps, per variant, beside the Transformer's.
Loss by step does not depend on how busy the machine is; seconds do.

Issue 29 asks why the recurrent translator learns slowly. A variant is
changes joined with "+": layers1 (one layer instead of two), emb<S>
(embeddings drawn from N(0, S^2) instead of keras' U(-0.05, 0.05)),
lr3e-3 (Adam at 3e-3 instead of 1e-3), noclip (no gradient clipping),
bidir (a bidirectional encoder); "base" changes nothing; "transformer" is
the recipe's quick Transformer with its schedule.

    .venv/bin/python benchmarks/rnn_first_steps.py --tokenizer runs/translate/spm.model base layers1+emb1.0
"""

import argparse
import time

import keras
import numpy as np

import kseq
from kseq.data.bible import load_bible_pairs
from kseq.data.bucketing import bucketed_pair_dataset
from kseq.data.tokenizers import load_tokenizer
from kseq.models import RNNSeq2Seq, TransformerSeq2Seq
from kseq.training.objectives.schedules import TransformerSchedule


def build(variant, vocab_size):
    """(model, learning rate, optimizer options) of a variant."""
    parts = variant.split("+")
    if variant == "transformer":
        model = TransformerSeq2Seq(vocab_size, vocab_size, num_layers=2, d_model=192, num_heads=4, ff_dim=768,
                                   max_length=97, share_embeddings=True)
        return model, TransformerSchedule(192, 400, 1.0), dict(beta_2=0.98, epsilon=1e-9, clipnorm=1.0)
    stddev = next((float(part[3:]) for part in parts if part.startswith("emb")), None)  # None: keras' uniform
    options = dict(embed_dim=192, units=256, num_layers=1 if "layers1" in parts else 2, attention="general",
                   bidirectional="bidir" in parts, embedding_stddev=stddev)
    model = RNNSeq2Seq(vocab_size, vocab_size, **options)
    optimizer = dict(beta_2=0.98, epsilon=1e-9) if "noclip" in parts else dict(beta_2=0.98, epsilon=1e-9, clipnorm=1.0)
    return model, 3e-3 if "lr3e-3" in parts else 1e-3, optimizer


class BatchLosses(keras.callbacks.Callback):
    """Each batch's loss (keras logs the epoch's running mean)."""

    def __init__(self):
        super().__init__()
        self.losses, self.mean = [], 0.0

    def on_train_batch_end(self, batch, logs=None):
        mean, k = float(logs["loss"]), len(self.losses) + 1
        self.losses.append(k * mean - (k - 1) * self.mean)
        self.mean = mean


def probe(variant, tokenizer, data, steps):
    keras.utils.set_random_seed(0)
    model, rate, optimizer = build(variant, tokenizer.vocab_size)
    model.compile(kseq.optimizers.FusedAdam(rate, **optimizer),
                  kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1))
    losses, start = BatchLosses(), time.time()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[losses])
    marks = {s: round(float(np.mean(losses.losses[s - 25:s])), 3) for s in range(50, steps + 1, 50)}
    print("PROBE", variant, marks, f"{time.time() - start:.0f}s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--tokenizer", required=True, help="a translation run's spm.model")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    tokenizer = load_tokenizer(args.tokenizer)
    sources, targets = load_bible_pairs("train")
    data, _ = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, token_budget=2560, max_length=96,
                                    seed=0, epochs=2)
    for variant in args.variants:
        probe(variant, tokenizer, data, args.steps)


if __name__ == "__main__":
    main()
