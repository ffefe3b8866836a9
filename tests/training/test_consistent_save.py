"""One save holds everything a resumed run needs: the weights and optimizer,
the data position, the stopping state and learning-rate factor (KeepBest)
and the snapshots to average (RecentWeights). A kill at any instant,
including right after an evaluation and before the save that follows it,
resumes to the uninterrupted run's end."""

import keras
import numpy as np
import pytest

import kseq
from kseq.data.bucketing import bucketed_pair_dataset
from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.synthetic import reversed_words
from kseq.training import recipe
from kseq.training.averaging import RecentWeights
from kseq.training.cadenced_fit import CadencedFit
from kseq.training.optimizers import FusedAdam
from kseq.training.periods import Cadence
from kseq.training.resume import ResumableBackup, TrainingPosition
from kseq.training.schedules import Scaled
from kseq.training.stopping import KeepBest

LETTERS = "abcdefghij"


class KillAt(keras.callbacks.Callback):
    """Raises as a kill would: after batch `batch` (1-based) of this run, or
    at the end of its `period`-th evaluation period (after the callbacks
    before it have logged and recorded that evaluation, before the save)."""

    def __init__(self, batch=None, period=None):
        super().__init__()
        self.batch, self.period, self.batches, self.periods = batch, period, 0, 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches == self.batch:
            raise KeyboardInterrupt

    def on_epoch_end(self, epoch, logs=None):
        self.periods += 1
        if self.periods == self.period:
            raise KeyboardInterrupt


def cadenced_run(workdir, kill=None):
    """A small translator trained 3 epochs in periods of 4 steps, stopping
    on the validation loss with patience 2 and a learning-rate factor,
    averaging snapshots every 3 steps; -> (model, KeepBest report, snapshot steps)."""
    tokenizer = CharacterTokenizer(LETTERS)
    sources, targets = reversed_words(120, LETTERS, min_length=2, max_length=11, seed=0)
    position = TrainingPosition()
    train, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, token_budget=60, max_length=14,
                                          seed=3, position=position, epochs=3)
    valid, _ = bucketed_pair_dataset(sources[:20], targets[:20], tokenizer, tokenizer, token_budget=60,
                                     max_length=14, shuffle=False)
    keras.utils.set_random_seed(7)
    model = kseq.models.RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=8, units=16,
                                   attention="dot")
    model.build()
    schedule = Scaled(3e-2)
    recipe.compile_model(model, FusedAdam(schedule), kseq.losses.MaskedSparseCategoricalCrossentropy())
    keep_best = KeepBest("val_loss", str(workdir / "checkpoints"), mode="min", patience=2, lr_factor=schedule.factor,
                         tolerance=0.0)
    recent = RecentWeights(every=3, count=3)
    backup = str(workdir / "backup")
    fit = CadencedFit(str(workdir), position, Cadence(steps=4), 3 * report.batches_per_epoch,
                      report.batches_per_epoch, save_every=5, max_minutes=None,
                      resuming=ResumableBackup.saved_state(backup), non_finite_hint="")
    fit.fit(model, train, valid, stopping=[keep_best, recent] + ([kill] if kill else []))
    return model, keep_best.report(), recent.steps


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return cadenced_run(tmp_path_factory.mktemp("whole"))


@pytest.mark.long
@pytest.mark.parametrize("kill", [dict(period=2), pytest.param(dict(period=3), marks=pytest.mark.slow),
                                  dict(batch=7), pytest.param(dict(batch=11), marks=pytest.mark.slow)],
                         ids=["after-evaluation-2", "after-evaluation-3", "mid-period", "after-a-save"])
def test_a_kill_at_any_instant_resumes_to_the_uninterrupted_end(uninterrupted, tmp_path, kill):
    model, kept, steps = uninterrupted
    assert kept["evaluations"] >= 4 and len(steps) == 3, "the run evaluates, and averages, past the kills"
    with pytest.raises(KeyboardInterrupt):
        cadenced_run(tmp_path, kill=KillAt(**kill))
    resumed, resumed_kept, resumed_steps = cadenced_run(tmp_path)
    assert resumed_kept == kept and resumed_steps == steps
    for a, e in zip(resumed.weights, model.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-5)
