"""Every model configuration learns a generated task to >= 99% exact match.

Tasks (30-id vocabulary, ids 4-29 as symbols):
- reverse a random sequence of 4-12 tokens: attention models and Transformers;
- reverse 4-8 tokens: context-vector models (no attention), whose single
  vector makes long sequences slow to learn (Bahdanau et al.'s point); the
  4-12 version runs too;
- copy 4-8 tokens with `reverse_source=True` (Sutskever et al.'s trick),
  with the peeky decoder.
The e2e tier runs one configuration (LSTM with dot attention); the
others are `slow` (40-100 s each here). Each run trains for a fixed budget on a warm-up + cosine schedule, stops
early once 500 held-out sequences are >= 99.6% right, and is judged on
1000 fresh sequences; trained attention models must also attend to the
source token they are emitting.
"""

import keras
import numpy as np
import pytest

from kseq.data import teacher_forcing
from kseq.training.scoring.evaluation import exact_match_ids as exact_match
from kseq.data.synthetic import random_sequences, reversal_task
from kseq.layers.masking import padding_mask
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from kseq.models import RNNSeq2Seq, TransformerSeq2Seq

pytestmark = pytest.mark.long
RNN_SIZE = dict(embed_dim=32, units=128)
TRANSFORMER_SIZE = dict(num_layers=2, d_model=64, num_heads=4, ff_dim=128, dropout=0.0, max_length=32)

# (name, model class, arguments, task, max task length, steps, peak learning rate)
# lstm-dot, checked every 100 steps, passes halfway through its 800-step
# budget (seeds 0-2: benchmarks/RESULTS.md, "Test suite and packaging"); the
# slow runs keep their check every 200.
RUNS = {
    "lstm-dot": (RNNSeq2Seq, dict(cell="lstm", attention="dot"), "reverse", 12, 800, 1e-2),
}
# The other configurations: 40-100 s each here, kept out of the default
# suite's 10 minutes (run with `-m slow`).
SLOW_RUNS = {
    "lstm-context-vector": (RNNSeq2Seq, dict(cell="lstm"), "reverse", 8, 2400, 1e-2),
    "transformer-post-norm": (TransformerSeq2Seq, dict(norm_first=False), "reverse", 12, 1600, 3e-3),
    # A vanilla RNN learns slowest of the attention models: 1600 steps fell
    # short of 99% (benchmarks/RESULTS.md, "Test suite and packaging").
    "rnn-general": (RNNSeq2Seq, dict(cell="rnn", attention="general"), "reverse", 12, 2400, 3e-3),
    "gru-concat": (RNNSeq2Seq, dict(cell="gru", attention="concat"), "reverse", 12, 1600, 1e-2),
    "gru-bahdanau-reverse-source": (
        RNNSeq2Seq, dict(cell="gru", attention="bahdanau", reverse_source=True), "reverse", 12, 1600, 1e-2),
    "bilstm-2-layers-general": (
        RNNSeq2Seq, dict(cell="lstm", attention="general", bidirectional=True, num_layers=2, units=64),
        "reverse", 12, 1600, 1e-2),
    "lstm-peeky-reverse-source": (
        RNNSeq2Seq, dict(cell="lstm", peeky=True, reverse_source=True), "copy", 8, 1600, 1e-2),
    "transformer-pre-norm": (TransformerSeq2Seq, dict(norm_first=True), "reverse", 12, 1600, 3e-3),
    "lstm-context-vector-12": (RNNSeq2Seq, dict(cell="lstm"), "reverse", 12, 12000, 5e-3),
    "gru-context-vector-12": (RNNSeq2Seq, dict(cell="gru"), "reverse", 12, 12000, 5e-3),
}


def make_task(task, count, max_length, seed):
    if task == "reverse":
        return reversal_task(count, max_length=max_length, seed=seed)
    sources = random_sequences(count, max_length=max_length, seed=seed)
    inputs, labels = teacher_forcing(sources, sources)
    return inputs, labels, sources


class StopWhenLearned(keras.callbacks.Callback):
    def __init__(self, inputs, targets, max_length, every=200, threshold=0.996):
        super().__init__()
        self.inputs, self.targets, self.max_length = inputs, targets, max_length
        self.every, self.threshold = every, threshold

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self.every == 0:
            generated = self.model.generate(self.inputs["source_ids"], max_length=self.max_length)
            if exact_match(generated, self.targets) >= self.threshold:
                self.model.stop_training = True


def train(name, runs, check_every=200):
    model_class, arguments, task, max_length, steps, peak = runs[name]
    keras.utils.set_random_seed(0)
    size = RNN_SIZE if model_class is RNNSeq2Seq else TRANSFORMER_SIZE
    model = model_class(30, 30, **{**size, **arguments})
    warmup = steps // 10
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, steps - warmup, alpha=0.02, warmup_target=peak, warmup_steps=warmup
    )
    model.compile(
        keras.optimizers.Adam(schedule, clipnorm=1.0),
        MaskedSparseCategoricalCrossentropy(),
        jit_compile=model_class is TransformerSeq2Seq,
    )
    inputs, labels, _ = make_task(task, 64 * steps, max_length, seed=1)
    check_inputs, _, check_targets = make_task(task, 500, max_length, seed=2)
    stop = StopWhenLearned(check_inputs, check_targets, max_length + 2, every=check_every)
    model.fit(inputs, labels, batch_size=64, epochs=1, verbose=0, callbacks=[stop])
    test_inputs, _, test_targets = make_task(task, 1000, max_length, seed=3)
    generated = model.generate(test_inputs["source_ids"], max_length=max_length + 2)
    return model, exact_match(generated, test_targets), test_inputs


def mirrored_attention(model, inputs):
    """Fraction of reversal steps t whose strongest attention is on source
    token n-1-t (the one to emit) or up to two positions after it: a forward
    encoder's state there still carries token n-1-t, so each reads the right
    token. (rnn-general attends to n+1-t at 75% of steps since the RNN
    layers are made at construction, a different draw of initial weights;
    to n-1-t before. Attention spread over 8-12 tokens hits about 0.3.)"""
    source = inputs["source_ids"][:200]
    generated = np.asarray(model.generate(source, max_length=14))
    bos = np.ones((len(source), 1), "int32")
    target = np.concatenate([bos, generated[:, :-1]], 1)
    weights = np.asarray(model.attention_weights({"source_ids": source, "target_ids": target}))
    lengths = np.asarray(padding_mask(source)).sum(1)
    hits = [
        weights[row, t].argmax() in (n - 1 - t, n - t, n + 1 - t) for row, n in enumerate(lengths) for t in range(n)
    ]
    return float(np.mean(hits))


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(RUNS))
def test_configuration_learns(name):
    model, score, inputs = train(name, RUNS, check_every=100)
    print(f"LEARNED {name}: exact match {score:.4f} on 1000 held-out sequences")
    assert score >= 0.99, f"{name}: exact match {score:.3f} on 1000 held-out sequences"
    if getattr(model, "attention", None) and RUNS[name][2] == "reverse":
        aligned = mirrored_attention(model, inputs)
        print(f"ALIGNED {name}: {aligned:.4f} of steps attend to the mirrored token")
        assert aligned >= 0.9, f"{name}: {aligned:.3f} of steps attend to the mirrored token"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_RUNS))
def test_slow_configuration_learns(name):
    model, score, inputs = train(name, SLOW_RUNS)
    print(f"LEARNED {name}: exact match {score:.4f} on 1000 held-out sequences")
    assert score >= 0.99, f"{name}: exact match {score:.3f} on 1000 held-out sequences"
    if getattr(model, "attention", None) and SLOW_RUNS[name][2] == "reverse":
        aligned = mirrored_attention(model, inputs)
        print(f"ALIGNED {name}: {aligned:.4f} of steps attend to the mirrored token")
        assert aligned >= 0.9, f"{name}: {aligned:.3f} of steps attend to the mirrored token"
