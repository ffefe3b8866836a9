"""Evaluation periods on a step or time cadence, and where fit's time goes."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.training.loop.periods import EvaluationPeriods, StepTimer
from kseq.training.progress import AUTO_EVALUATION_SHARE, Cadence, parse_cadence


@pytest.mark.parametrize("text, expected", [
    ("500", Cadence(steps=500)), ("2m", Cadence(minutes=2.0)), ("1.5min", Cadence(minutes=1.5)),
    ("auto", Cadence(minutes=2.0, evaluation_share=AUTO_EVALUATION_SHARE)),
])
def test_parse_cadence(text, expected):
    assert parse_cadence(text, budget_minutes=12.0) == expected


def test_auto_without_a_budget_and_bad_values():
    assert parse_cadence("auto") == Cadence(minutes=10.0, evaluation_share=AUTO_EVALUATION_SHARE)
    for bad in ("0", "-3", "2.5", "often", "3h"):
        with pytest.raises(ValueError, match="`eval_every` must be"):
            parse_cadence(bad)


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.period_ends, self.validated, self.batches = [], [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.batches.append(int(self.model.optimizer.iterations.numpy()))

    def on_epoch_end(self, epoch, logs=None):
        self.period_ends.append(int(self.model.optimizer.iterations.numpy()))
        self.validated.append("val_loss" in logs)


def fit_in_periods(cadence, total_steps, batches=7, epochs=3, clock=None):
    """A dataset of `epochs` passes over `batches` distinct batches, fit in one pass."""
    x = np.arange(batches * 2, dtype="float32").reshape(batches, 2, 1)
    data = tf.data.Dataset.from_tensor_slices((x, x)).repeat(epochs)
    data = data.apply(tf.data.experimental.assert_cardinality(batches * epochs))
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    recorder, timer = Recorder(), StepTimer()
    periods = EvaluationPeriods(cadence, total_steps, show=False, **({"clock": clock} if clock else {}))
    model.fit(data, validation_data=data.take(1), epochs=total_steps, steps_per_epoch=batches * epochs,
              callbacks=[timer, recorder, periods], verbose=0, shuffle=False)
    return model, recorder, periods, timer


def test_periods_end_on_the_step_cadence_and_training_at_the_total():
    model, recorder, periods, timer = fit_in_periods(Cadence(steps=5), total_steps=17)
    assert recorder.period_ends == [5, 10, 15, 17] and all(recorder.validated)
    assert recorder.batches == list(range(17)), "one data iterator across the periods"
    assert periods.periods == 4 and int(model.optimizer.iterations.numpy()) == 17
    assert timer.steps == 17 and 0 < timer.train_step_seconds <= timer.fit_seconds
    assert 0 < timer.train_step_share <= 1


def test_periods_end_on_a_time_cadence():
    readings = iter(np.arange(0.0, 1e4, 25.0))  # every reading 25 s later
    _, recorder, _, _ = fit_in_periods(Cadence(minutes=1.0), total_steps=9,
                                       clock=lambda: float(next(readings)))
    # Readings: period start, then one per batch end: 25, 50, 75 s -> a
    # period ends every third batch.
    assert recorder.period_ends == [3, 6, 9]


class FakeTime(keras.callbacks.Callback):
    """A clock: each train step takes `step_seconds`, each evaluation (period end) `evaluation_seconds`."""

    def __init__(self, step_seconds, evaluation_seconds):
        super().__init__()
        self.now, self.step_seconds, self.evaluation_seconds = 0.0, step_seconds, evaluation_seconds

    def on_train_batch_end(self, batch, logs=None):
        self.now += self.step_seconds

    def on_epoch_end(self, epoch, logs=None):
        self.now += self.evaluation_seconds


@pytest.mark.parametrize("share, evaluation_seconds, expected_ends", [
    (None, 12.0, [6, 12, 18, 21]),  # a plain minute: evaluations take what they take
    (0.1, 12.0, [6, 18, 21]),  # after a 12 s evaluation a period lasts 120 s: 12 steps
    (0.1, 3.0, [6, 12, 18, 21]),  # 3 s is under 10% of a minute: every minute
])
def test_a_period_of_minutes_lasts_long_enough_for_its_evaluation_share(share, evaluation_seconds, expected_ends):
    x = np.arange(14, dtype="float32").reshape(7, 2, 1)
    data = tf.data.Dataset.from_tensor_slices((x, x)).repeat(3).apply(tf.data.experimental.assert_cardinality(21))
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    fake, recorder = FakeTime(step_seconds=10.0, evaluation_seconds=evaluation_seconds), Recorder()
    cadence = Cadence(minutes=1.0, evaluation_share=share)
    periods = EvaluationPeriods(cadence, 21, show=False, clock=lambda: fake.now)
    model.fit(data, validation_data=data.take(1), epochs=21, steps_per_epoch=21,
              callbacks=[fake, recorder, periods], verbose=0, shuffle=False)
    assert recorder.period_ends == expected_ends
    assert periods.evaluation_seconds == (None if share is None else evaluation_seconds)
    assert ("longer where" in str(cadence)) == (share is not None)


def test_progress_lines_show_the_step_loss_speed_and_time_left(capsys):
    from kseq.training.loop.periods import ProgressLine

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    x, y = np.ones((8, 2), "float32"), np.zeros((8, 1), "float32")
    model.fit(x, y, batch_size=2, epochs=1, verbose=0,
              callbacks=[ProgressLine(every_seconds=0.0, budget_minutes=5, spent_seconds=120)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["step 1", "step 2", "step 3", "step 4"]
    assert all(" steps/s, " in line and line.endswith(" min of 5 left") for line in lines)
    assert float(lines[0].split("loss ")[1].split(",")[0]) > 0
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[ProgressLine(every_seconds=3600)])
    assert capsys.readouterr().out == "", "no line before its time"


@pytest.mark.e2e
def test_a_streamed_run_ends_with_its_data_and_resumed_after_its_last_batch_trains_nothing(tmp_path):
    """Fit on streamed files (total unknown): training stops at the
    end of the last epoch; a run resumed from the save made there ends at
    once, with the same weights."""
    from kseq.data import CharacterTokenizer
    from kseq.data.corpus import scan_corpus
    from kseq.data.streaming import streamed_pair_dataset
    from kseq.data.bucketing import bucketed_pair_dataset
    from kseq.models import RNNSeq2Seq
    from kseq.training.task import compile_model
    from kseq.training.loop.fit import Fit
    from kseq.training.devices.distribution import weights_fingerprint
    from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
    from kseq.training.objectives.optimizers import FusedAdam

    letters = "abcdefgh"
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list(letters), rng.integers(2, 9))) for _ in range(150)]
    (tmp_path / "pairs.tsv").write_text("".join(f"{w}\t{w[::-1]}\n" for w in words))
    scan = scan_corpus([str(tmp_path / "pairs.tsv")], cache_dir=tmp_path)
    tokenizer = CharacterTokenizer(letters)

    def run():
        fit = Fit(str(tmp_path / "run"), Cadence(steps=7), save_every=5)
        position = fit.position
        train = streamed_pair_dataset(scan, tokenizer, tokenizer, position, token_budget=60, max_length=12,
                                      epochs=2, seed=1)
        valid, _ = bucketed_pair_dataset(words[:10], [w[::-1] for w in words[:10]], tokenizer, tokenizer,
                                         token_budget=60, max_length=12, shuffle=False)
        keras.utils.set_random_seed(3)
        model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=8, units=8)
        model.build()
        compile_model(model, FusedAdam(1e-2), MaskedSparseCategoricalCrossentropy())
        return model, fit.fit(model, train, valid, 2), position

    model, report, position = run()
    per_epoch = sum(count for (epoch, _), count in position._windows.items() if epoch == 0)
    assert report["steps"] == 2 * per_epoch and report["epochs_run"] == 2.0
    again, resumed, _ = run()  # the backup stays until `release`: this run resumes after the last batch
    assert resumed["resumed_from_step"] == report["steps"] == resumed["steps"]
    assert weights_fingerprint(again) == weights_fingerprint(model)
