"""The learning rate annealed to the end of the training (`--anneal`): the
steps a time budget allows estimated from the budget's clock, the plan
saved and restored with the backup, patience starting the anneal, the
workers agreeing on the chief's estimate, the decision as reported; and a
run of known steps killed anywhere resuming to the uninterrupted weights,
bit for bit."""

import types

import keras
import numpy as np
import pytest

from kseq.training.devices.distribution import WorkersAgree
from kseq.training.loop.anneal import BudgetAnneal, anneal_decision
from kseq.training.loop.stopping import KeepBest
from kseq.training.objectives.schedules import Annealed, TransformerSchedule
from support import KillAt, cadenced_run


class Clock:
    """The budget's clock, moved by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def stepping(anneal, steps, clock, seconds_a_step=1.0):
    """Runs `steps` batch ends on `anneal`'s model, each `seconds_a_step` apart."""
    for _ in range(steps):
        clock.now += seconds_a_step
        anneal.model.optimizer.iterations.assign_add(1)
        anneal.on_train_batch_end(0)


def attached(anneal, step=0):
    model = types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=keras.Variable(step, dtype="int64")),
                                  stop_training=False)
    anneal.set_model(model)
    anneal.on_train_begin()
    return anneal


def test_the_budget_s_steps_are_estimated_after_warm_up_at_evaluations_and_where_the_anneal_begins(
        tmp_path, capsys):
    """A 100-second budget at a step a second: no estimate during the
    warm-up (30 steps), one after it, another at the evaluation after a
    10-second pause (which the budget's clock counts), one more where the
    planned anneal begins; training stops at the last estimated step, with
    the rate at 0 there. A resumed run starts from the saved plan."""
    schedule, clock = Annealed(TransformerSchedule(64, warmup_steps=30), 0.2), Clock()
    anneal = attached(BudgetAnneal(schedule, budget_seconds=100.0, clock=clock))
    stepping(anneal, 29, clock)
    assert anneal.state["estimates"] == [] and float(schedule.total_steps.numpy()) == 0.0
    stepping(anneal, 1, clock)  # step 30 at 30 s: 29 steps in the 29 s since the first
    assert anneal.state["estimates"] == [[30, 100]] and float(schedule.total_steps.numpy()) == 100.0
    assert "the anneal ends at step 100 (from step 80)" in capsys.readouterr().out
    stepping(anneal, 20, clock)
    clock.now += 10.0  # an evaluation's 10 s
    anneal.on_epoch_end(0)
    assert anneal.state["estimates"][-1] == [50, 50 + int(49 / 59 * 40)] == [50, 83]
    assert float(schedule.factor(66)) == 1.0 and float(schedule.factor(83)) == 0.0
    assert float(schedule.factor(82)) == pytest.approx(1 / (0.2 * 83)), "the last update still moves"
    stepping(anneal, 16, clock)
    assert len(anneal.state["estimates"]) == 2
    stepping(anneal, 1, clock)  # step 67, where the anneal begins: the speed over 76 s
    assert anneal.state["estimates"][-1] == [67, 67 + int(66 / 76 * 23)] == [67, 86]
    stepping(anneal, 18, clock)
    assert not anneal.model.stop_training and len(anneal.state["estimates"]) == 3
    stepping(anneal, 1, clock)
    assert anneal.model.stop_training and anneal.report()["lr_anneal_total_steps"] == 86
    assert "the learning rate's anneal ended at step 86" in capsys.readouterr().out

    anneal.save_state(str(tmp_path))
    resumed = attached(BudgetAnneal(Annealed(0.01, 0.2), budget_seconds=100.0, clock=clock), step=50)
    resumed.restore_state(str(tmp_path))
    resumed.on_train_begin()
    assert float(resumed.schedule.total_steps.numpy()) == 86.0, "the saved plan from the first step on"
    stepping(resumed, 25, clock)
    assert len(resumed.state["estimates"]) == 3, "past the warm-up's and the anneal's: only evaluations estimate"


def test_known_steps_are_the_plan_and_an_estimate_only_shortens_it():
    clock = Clock()
    anneal = attached(BudgetAnneal(Annealed(0.01, 0.5), budget_seconds=100.0, known_steps=40, clock=clock))
    assert float(anneal.schedule.total_steps.numpy()) == 40.0
    stepping(anneal, 21, clock)  # 20 steps measured
    assert anneal.state["estimates"] == [[21, 40]], "100 steps would fit the budget; the epochs end at 40"
    epochs_only = attached(BudgetAnneal(Annealed(0.01, 0.5), known_steps=40))
    stepping(epochs_only, 39, clock)
    assert epochs_only.state["estimates"] == [] and not epochs_only.model.stop_training
    stepping(epochs_only, 1, clock)
    assert epochs_only.model.stop_training


def test_patience_starts_the_anneal_and_a_run_annealing_already_goes_on(tmp_path, capsys):
    """Patience 1 with a plan of 100 steps at share 0.5: at step 20 the
    anneal starts there (the run ends at step 40, its second half
    annealed); later falls neither stop nor move the plan. Without a plan
    patience stops, as it does without an anneal."""
    anneal = attached(BudgetAnneal(Annealed(0.01, 0.5), known_steps=100))
    keep = KeepBest("val_loss", str(tmp_path / "best"), mode="min", patience=1)
    keep.anneal = anneal
    keep.set_model(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
    keep.model.compile("sgd", "mse")
    keep.model.stop_training = False
    for step, loss in ((10, 1.0), (20, 2.0), (30, 3.0)):
        keep.model.optimizer.iterations.assign(step)
        anneal.model.optimizer.iterations.assign(step)
        keep.on_epoch_end(0, {"val_loss": loss})
    assert not keep.model.stop_training and not keep.state["stopped_early"]
    assert anneal.state["patience_step"] == 20 and float(anneal.schedule.total_steps.numpy()) == 40.0
    assert "training ends at step 40" in capsys.readouterr().out
    assert anneal.report() == {"lr_anneal_total_steps": 40, "lr_anneal_estimates": [],
                               "lr_anneal_patience_step": 20}
    unplanned = attached(BudgetAnneal(Annealed(0.01, 0.5), budget_seconds=60.0, clock=Clock()))
    assert not unplanned.end_early(5), "no estimate yet: patience stops the run"


def test_several_workers_apply_the_chief_s_estimate_at_the_same_step():
    """Each worker estimates from its own clock; only the chief's goes
    through `WorkersAgree`'s all-reduce, and every worker applies it there."""
    workers = []
    for chief in (True, False):
        clock = Clock()
        anneal = attached(BudgetAnneal(Annealed(0.01, 0.5), budget_seconds=100.0, clock=clock, agreed=True))
        stepping(anneal, 21, clock, seconds_a_step=1.0 if chief else 2.0)
        agree = WorkersAgree(None, anneal=anneal)
        agree.set_model(anneal.model)
        agree.chief, agree.replicas = chief, 2
        workers.append((anneal, agree))
    assert [anneal.pending for anneal, _ in workers] == [100, 50], "each worker's own estimate"
    assert all(float(anneal.schedule.total_steps.numpy()) == 0.0 for anneal, _ in workers), "none applied alone"
    sent = [None, None]
    for index, (_, agree) in enumerate(workers):
        agree._summed = lambda values, index=index: sent.__setitem__(index, values.numpy()) or values.numpy()
    for _, agree in workers:
        agree.on_train_batch_end(0)
    total = sent[0] + sent[1]
    for anneal, agree in workers:  # the all-reduce's sum, as each worker gets it
        agree._summed = lambda values: total
        agree.on_train_batch_end(0)
    assert [float(anneal.schedule.total_steps.numpy()) for anneal, _ in workers] == [100.0, 100.0]
    assert [anneal.state["total_steps"] for anneal, _ in workers] == [100, 100]


def test_the_decision_says_what_the_anneal_does():
    schedule = Annealed(0.01, 0.2)
    assert anneal_decision(None, 6.0, False).metrics() == {
        "lr_anneal": 0.0, "lr_anneal_reason": "--anneal 0: the rate is not annealed"}
    budget = anneal_decision(schedule, 6.0, False)
    assert budget.value == 0.2 and budget.details == {"lr_anneal_shape": "linear"}
    assert budget.reason.startswith("linear to 0 over the last 20% of the steps the 6-minute budget allows")
    assert anneal_decision(schedule, None, True).reason == "linear to 0 over the last 20% of the steps of --epochs"
    assert anneal_decision(schedule, None, False).value == 0.0


def annealed_run(workdir, kill=None):
    """3 epochs of 19 batches in periods of 4 steps, the second half of
    the steps annealed; patience 2 and a fall-back lowering the rate on
    any fall. -> (model, fit's metrics, KeepBest's report)."""
    def stopping(schedule):
        return [KeepBest("val_loss", str(workdir / "checkpoints"), mode="min", patience=2,
                         lr_factor=schedule.factor, tolerance=0.0)]

    model, metrics, (keep,), _ = cadenced_run(workdir, epochs=3, cadence_steps=4, save_every=5, learning_rate=3e-2,
                                              stopping=stopping, kill=kill, anneal=0.5)
    return model, metrics, keep.report()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return annealed_run(tmp_path_factory.mktemp("whole"))


# What differs between a run and the same run resumed: its timings, where it
# resumed, and (without a monitor) the evaluations of this process.
RESUMED = ("train_seconds", "train_step_seconds", "fit_seconds", "resumed_from_step", "resumed_from_epoch",
           "evaluations")


@pytest.mark.e2e
@pytest.mark.long
@pytest.mark.parametrize("kill", [dict(period=6), dict(batch=30), pytest.param(dict(period=10),
                                                                               marks=pytest.mark.slow)],
                         ids=["after-patience-began-the-anneal", "mid-anneal", "after-a-fall-in-the-anneal"])
def test_a_killed_annealed_run_resumes_to_the_uninterrupted_weights(uninterrupted, tmp_path, kill):
    """Killed after the evaluation whose patience starts the anneal (before
    its save), in the anneal, or after a fall back to the best weights in
    it: resumed, the run ends as the uninterrupted one, bit for bit."""
    model, metrics, kept = uninterrupted
    assert metrics["lr_anneal_patience_step"] == 24 and metrics["steps"] == metrics["lr_anneal_total_steps"] == 48
    assert kept["reverts"] == 2 and not kept["stopped_early"], "the run falls back, in the anneal too"
    with pytest.raises(KeyboardInterrupt):
        annealed_run(tmp_path, kill=KillAt(**kill))
    resumed, resumed_metrics, resumed_kept = annealed_run(tmp_path)
    assert resumed_metrics["resumed_from_step"] is not None
    assert resumed_kept == kept
    assert {k: v for k, v in resumed_metrics.items() if k not in RESUMED} == {
        k: v for k, v in metrics.items() if k not in RESUMED}
    for got, want in zip(resumed.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
