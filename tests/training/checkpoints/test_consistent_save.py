"""One save holds everything a resumed run needs: the weights and optimizer,
the data position, the stopping state and learning-rate factor (KeepBest)
and the snapshots to average (RecentWeights). A kill at any instant,
including right after an evaluation and before the save that follows it,
resumes to the uninterrupted run's end."""

import numpy as np
import pytest

from kseq.training.scoring.averaging import RecentWeights
from kseq.training.loop.stopping import KeepBest
from support import KillAt, cadenced_run


def stopping_run(workdir, kill=None):
    """3 epochs in periods of 4 steps, stopping on the validation loss with
    patience 2 and a learning-rate factor, averaging snapshots every 3
    steps; -> (model, KeepBest report, snapshot steps)."""
    def stopping(schedule):
        return [KeepBest("val_loss", str(workdir / "checkpoints"), mode="min", patience=2,
                         lr_factor=schedule.factor, tolerance=0.0), RecentWeights(every=3, count=3)]

    model, _, (keep_best, recent), _ = cadenced_run(workdir, epochs=3, cadence_steps=4, save_every=5,
                                                    learning_rate=3e-2, stopping=stopping, kill=kill)
    return model, keep_best.report(), recent.steps


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return stopping_run(tmp_path_factory.mktemp("whole"))


@pytest.mark.e2e
@pytest.mark.long
@pytest.mark.parametrize("kill", [dict(period=2), pytest.param(dict(period=3), marks=pytest.mark.slow),
                                  dict(batch=7), pytest.param(dict(batch=11), marks=pytest.mark.slow)],
                         ids=["after-evaluation-2", "after-evaluation-3", "mid-period", "after-a-save"])
def test_a_kill_at_any_instant_resumes_to_the_uninterrupted_end(uninterrupted, tmp_path, kill):
    model, kept, steps = uninterrupted
    assert kept["evaluations"] >= 4 and len(steps) == 3, "the run evaluates, and averages, past the kills"
    with pytest.raises(KeyboardInterrupt):
        stopping_run(tmp_path, kill=KillAt(**kill))
    resumed, resumed_kept, resumed_steps = stopping_run(tmp_path)
    assert resumed_kept == kept and resumed_steps == steps
    for a, e in zip(resumed.weights, model.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-5)
