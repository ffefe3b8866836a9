"""KeepBest (patience, best weights, resume) and choosing by validation scores."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.decoding import Limits
from kseq.decoding.constraints import source_length_limits
from kseq.training.scoring.averaging import RecentWeights, keep_better_average
from kseq.training.scoring.selection import all_scores, choose_metric, length_ratio_for, tune_decoding
from kseq.training.objectives.schedules import Scaled, TransformerSchedule
from kseq.training.loop.stopping import KeepBest, stopping_monitor


def tiny_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(), "mse")
    return model


def evaluate(callback, model, epoch, value, marker):
    """An evaluation scoring `value`, with the weights set to `marker`."""
    model.layers[0].kernel.assign(np.full((2, 1), marker, "float32"))
    callback.on_epoch_end(epoch, {"val_chrf": value})


def kernel(model):
    return float(model.layers[0].kernel.numpy()[0, 0])


def test_keep_best_stops_after_patience_and_restores_the_best_weights(tmp_path):
    model = tiny_model()
    keep = KeepBest("val_chrf", str(tmp_path), patience=2)
    keep.set_model(model)
    for epoch, value in enumerate([10.0, 30.0, 20.0]):
        evaluate(keep, model, epoch, value, marker=epoch)
        assert not model.stop_training
    evaluate(keep, model, 3, 30.0, marker=3)  # equal is no improvement
    assert model.stop_training
    keep.on_train_end()
    assert kernel(model) == 1.0, "the weights of the evaluation that scored 30"
    assert keep.report() | {"best_step": None} == {
        "monitor": "val_chrf", "patience": 2, "best": 30.0, "best_step": None, "best_evaluation": 2,
        "best_logs": {"val_chrf": 30.0}, "wait": 2, "evaluations": 4, "scores": [10.0, 30.0, 20.0, 30.0], "stopped_early": True, "lr_factor": 1.0,
        "reverts": 0}


def test_keep_best_resumes_its_count_and_a_fresh_run_forgets_it(tmp_path):
    model = tiny_model()
    first = KeepBest("val_chrf", str(tmp_path), patience=3)
    first.set_model(model)
    evaluate(first, model, 0, 5.0, marker=7)
    evaluate(first, model, 1, 4.0, marker=8)
    assert json.loads((tmp_path / "best.json").read_text())["wait"] == 1
    # Killed here; the resumed run continues the count and the best.
    resumed = KeepBest("val_chrf", str(tmp_path), patience=3, resume=True)
    resumed.set_model(model)
    evaluate(resumed, model, 0, 4.5, marker=9)
    evaluate(resumed, model, 1, 4.0, marker=10)
    assert model.stop_training and resumed.report()["evaluations"] == 4
    resumed.on_train_end()
    assert kernel(model) == 7.0
    fresh = KeepBest("val_chrf", str(tmp_path), patience=3)
    assert fresh.report()["best"] is None and not (tmp_path / "best.json").exists()


def test_keep_best_on_a_loss_and_without_patience(tmp_path):
    model = tiny_model()
    keep = KeepBest("val_loss", str(tmp_path), mode="min", patience=0)
    keep.set_model(model)
    for epoch, loss in enumerate([3.0, 2.0, 2.5, 2.6, 2.7, 2.8]):
        model.layers[0].kernel.assign(np.full((2, 1), epoch, "float32"))
        keep.on_epoch_end(epoch, {"val_loss": loss})
    assert not model.stop_training
    keep.on_train_end()
    assert kernel(model) == 1.0
    assert not os.listdir(tmp_path), "a run that ended leaves nothing to resume"
    with pytest.raises(ValueError, match="`mode` must be one of"):
        KeepBest("val_loss", str(tmp_path), mode="lowest")
    with pytest.raises(ValueError, match="`patience` must be >= 0"):
        KeepBest("val_loss", str(tmp_path), patience=-1)
    with pytest.raises(ValueError, match=r"`decay` must be a finite number in \(0.0, 1.0\]"):
        KeepBest("val_loss", str(tmp_path), decay=0.0)


def test_the_metric_fits_the_targets():
    assert choose_metric(["1984-03-03", "2001-01-01", "one two"])[0] == "exact_match"
    long = ["a verse of the bible that runs on", "and on and on"]
    metric, reason = choose_metric(long)
    assert metric == "chrf" and "median of 6 words" in reason
    assert choose_metric(long, "bleu") == ("bleu", "asked for")
    with pytest.raises(ValueError, match="`metric` must be one of auto, bleu, chrf, exact_match"):
        choose_metric(long, "rouge")


def test_all_scores_and_decoding_tuning_pick_the_best_and_the_first_of_ties():
    references = ["1984-03-03", "2001-01-01"]
    assert all_scores(references, references)["exact_match"] == 100.0
    outputs = {0: ["1984-03-03", "2001-01-02"], 1: references, 2: references}
    best, table = tune_decoding(lambda settings: lambda sources: outputs[settings["n"]],
                                [{"n": 0}, {"n": 1}, {"n": 2}], ["x", "y"], references, "exact_match")
    assert best == {"n": 1}
    assert [row["exact_match"] for row in table] == [50.0, 100.0, 100.0]


def test_a_plateau_goes_back_to_the_best_weights_with_a_lower_rate_and_resumes_it(tmp_path):
    model = tiny_model()
    schedule = Scaled(TransformerSchedule(d_model=16, warmup_steps=4))
    keep = KeepBest("val_chrf", str(tmp_path), patience=4, lr_factor=schedule.factor, decay=0.5)
    keep.set_model(model)
    keep.on_train_begin()
    evaluate(keep, model, 0, 50.0, marker=1)
    evaluate(keep, model, 1, 40.0, marker=2)  # worse: back to marker 1, half the rate
    assert kernel(model) == 1.0 and float(schedule.factor.numpy()) == 0.5
    evaluate(keep, model, 2, 45.0, marker=3)
    assert kernel(model) == 1.0 and float(schedule.factor.numpy()) == 0.25
    assert keep.report()["reverts"] == 2 and not model.stop_training
    evaluate(keep, model, 3, 49.5, marker=5)  # 1% below the best: noise, no revert (but no gain)
    assert kernel(model) == 5.0 and float(schedule.factor.numpy()) == 0.25
    # A resumed run starts at the lowered rate.
    fresh = Scaled(TransformerSchedule(d_model=16, warmup_steps=4))
    resumed = KeepBest("val_chrf", str(tmp_path), patience=4, resume=True, lr_factor=fresh.factor)
    resumed.set_model(model)
    resumed.on_train_begin()
    assert float(fresh.factor.numpy()) == 0.25
    evaluate(resumed, model, 0, 30.0, marker=4)  # the fourth miss stops, with no further decay
    assert model.stop_training and float(fresh.factor.numpy()) == 0.25


def test_a_fall_that_sampling_noise_explains_does_not_revert(tmp_path):
    model = tiny_model()
    schedule = Scaled(TransformerSchedule(d_model=16, warmup_steps=4))
    keep = KeepBest("val_chrf", str(tmp_path), lr_factor=schedule.factor, noise=lambda best: 0.1 * best)
    keep.set_model(model)
    keep.on_train_begin()
    evaluate(keep, model, 0, 50.0, marker=1)
    evaluate(keep, model, 1, 46.0, marker=2)  # 8% down: within the noise (5 points)
    assert kernel(model) == 2.0 and float(schedule.factor.numpy()) == 1.0
    evaluate(keep, model, 2, 44.0, marker=3)  # 12% down: a fall
    assert kernel(model) == 1.0 and float(schedule.factor.numpy()) == 0.5


def test_scaled_schedule_multiplies_and_round_trips():
    inner = TransformerSchedule(d_model=16, warmup_steps=4)
    scaled = Scaled(inner, factor=0.5)
    assert float(scaled(7)) == pytest.approx(0.5 * float(inner(7)))
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(scaled))
    assert float(copy(7)) == pytest.approx(float(scaled(7)))
    assert float(Scaled(1e-3)(100)) == pytest.approx(1e-3)


def test_the_length_ratio_is_the_smallest_that_fits_every_pair():
    rng = np.random.default_rng(0)
    sources = rng.integers(0, 30, 200).tolist()
    targets = [int(n * rng.uniform(0.5, 2.5)) + int(rng.integers(0, 8)) for n in sources]
    ratio = length_ratio_for(sources, targets)
    limits = lambda r: source_length_limits(  # noqa: E731
        tf.constant([[5] * n + [0] * (30 - n) for n in sources]), Limits(10**6, max_length_ratio=r))
    fits = lambda r: all(limit >= target + 1 for limit, target, n in zip(limits(r).numpy(), targets, sources) if n)  # noqa: E731
    assert fits(ratio) and not fits(ratio - 0.1)
    assert length_ratio_for([0, 0], [5, 9]) == 0.1, "empty sources are ignored"


def test_headroom_scales_the_fitted_ratio_up_to_the_step():
    sources, targets = [10, 4, 20], [12, 9, 15]  # fits at 1.1
    assert length_ratio_for(sources, targets, headroom=1.5) == 1.7  # ceil(16.5) steps of 0.1
    assert length_ratio_for(sources, targets, headroom=1.0) == 1.1
    with pytest.raises(ValueError, match="headroom"):
        length_ratio_for(sources, targets, headroom=0.5)


@pytest.mark.parametrize("average_is_better", [True, False])
def test_the_average_of_snapshots_is_kept_only_where_it_scores_better(average_is_better):
    model = tiny_model()
    recent = RecentWeights(every=1, count=2)
    recent.set_model(model)
    for step, value in ((1, 1.0), (2, 3.0)):  # snapshots of kernels all 1, then all 3
        model.set_weights([np.full_like(w, value) for w in model.get_weights()])
        model.optimizer.iterations.assign(step)
        recent.on_train_batch_end(0)
    model.set_weights([np.full_like(w, 5.0) for w in model.get_weights()])
    # The score is the kernel's mean: 5 now, 2 averaged.
    score = lambda m: float(np.mean(m.get_weights()[0]))  # noqa: E731
    report = keep_better_average(model, recent, score, "min" if average_is_better else "max")
    assert report == {"averaged": average_is_better, "steps": [1, 2], "score_before": 5.0, "score_averaged": 2.0}
    assert score(model) == (2.0 if average_is_better else 5.0)
    single = RecentWeights(every=1, count=2)
    assert keep_better_average(model, single, score, "min")["averaged"] is False


def test_training_stops_on_exact_match_for_short_targets_and_on_the_loss_otherwise():
    assert stopping_monitor("exact_match", "mirrored") == ("val_exact_match", "max")
    assert stopping_monitor("chrf", "mirrored") == ("val_loss", "min")
    assert stopping_monitor("exact_match", "multiworker") == ("val_loss", "min")
