"""`--accumulate N`: N batches make one update, equal to one batch N times
larger, and a cadenced run with it resumes where it was killed."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import kseq
from kseq.data.bucketing import bucketed_pair_dataset
from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.synthetic import reversed_words
from kseq.training import recipe
from kseq.training.cadenced_fit import CadencedFit
from kseq.training.optimizers import FusedAdam
from kseq.training.periods import Cadence
from kseq.training.resume import ResumableBackup, TrainingPosition

LETTERS = "abcdefghij"


def fit_classifier(strategy, batch_size, accumulate):
    """Weights after 2 epochs of a small classifier on 64 examples; the
    clipping norm is small enough to clip every update."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(3)])
        recipe.compile_model(model, FusedAdam(1e-2, clipnorm=0.05),
                             keras.losses.SparseCategoricalCrossentropy(from_logits=True), accumulate=accumulate)
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(64, 5)), rng.integers(0, 3, 64), batch_size=batch_size, epochs=2, verbose=0,
              shuffle=False)
    return model


@pytest.mark.parametrize("replicas", [1, 2])
def test_n_accumulated_batches_step_as_one_batch_n_times_larger(replicas):
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    large = fit_classifier(strategy, batch_size=16, accumulate=1)
    accumulated = fit_classifier(strategy, batch_size=4, accumulate=4)
    assert int(accumulated.optimizer.iterations.numpy()) == int(large.optimizer.iterations.numpy()) == 8
    for a, e in zip(accumulated.weights, large.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-5, atol=1e-6)
    alone = fit_classifier(strategy, batch_size=4, accumulate=1)
    assert not np.allclose(np.asarray(alone.weights[0]), np.asarray(large.weights[0]), atol=1e-4)


def test_accumulate_needs_an_optimizer_not_built_yet():
    optimizer = FusedAdam(1e-3)
    optimizer.build([keras.Variable(np.zeros(2, "float32"))])
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="Gradient accumulation needs an optimizer that is not built"):
        recipe.compile_model(model, optimizer, "mse", accumulate=2)


class KillAt(keras.callbacks.Callback):
    """Raises after the batch that brings the batches trained to `batches`, as a kill would."""

    def __init__(self, batches):
        super().__init__()
        self.batches, self.seen = batches, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batches:
            raise KeyboardInterrupt


def cadenced_run(workdir, accumulate=2, callbacks=()):
    tokenizer = CharacterTokenizer(LETTERS)
    sources, targets = reversed_words(120, LETTERS, min_length=2, max_length=11, seed=0)
    position = TrainingPosition()
    train, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, token_budget=60, max_length=14,
                                          seed=3, position=position, epochs=2)
    valid, _ = bucketed_pair_dataset(sources[:20], targets[:20], tokenizer, tokenizer, token_budget=60,
                                     max_length=14, shuffle=False)
    keras.utils.set_random_seed(7)
    model = kseq.models.RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=8, units=16,
                                   attention="dot")
    model.build()
    recipe.compile_model(model, FusedAdam(1e-2, clipnorm=1.0), kseq.losses.MaskedSparseCategoricalCrossentropy(),
                         accumulate=accumulate)
    total = 2 * report.batches_per_epoch
    backup = str(workdir / "backup")
    fit = CadencedFit(str(workdir), position, Cadence(steps=5), total, report.batches_per_epoch, save_every=3,
                      max_minutes=None, resuming=ResumableBackup.saved_state(backup), non_finite_hint="")
    fit.fit(model, train, valid, logging=list(callbacks))
    return model, fit.report(model), total


def test_a_killed_run_with_accumulation_resumes_to_the_same_weights(tmp_path):
    reference, report, total = cadenced_run(tmp_path / "reference")
    assert report["steps"] == total // 2 and report["epochs_run"] == 2.0
    with pytest.raises(KeyboardInterrupt):
        cadenced_run(tmp_path / "killed", callbacks=[KillAt(5)])
    saved = ResumableBackup.saved_state(str(tmp_path / "killed" / "backup"))
    # Saved after 3 batches, between updates: the accumulated gradient is saved too.
    assert (saved["batches"], saved["step"]) == (3, 1)
    resumed, report, _ = cadenced_run(tmp_path / "killed")
    assert report["resumed_from_step"] == 1 and report["steps"] == total // 2
    for a, e in zip(resumed.weights, reference.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-5)
