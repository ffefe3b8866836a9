"""A learning rate that knows its budget: `BudgetAnneal` plans the step at
which an `Annealed` schedule reaches 0, the last step of an `--epochs`
run or an estimate of the last step a `--max-minutes` budget allows, and
ends training there; the plan goes into every save, so a resumed run
anneals as the uninterrupted one would."""

import json
import math
import os

import keras

from kseq._atomic import write_json_atomic
from kseq._compat import ends_epoch_only
from kseq.training.devices.distribution import workers
from kseq.training.objectives.schedules import annealed_schedule
from kseq.training.progress import global_step
from kseq.training.reporting.decisions import Decision

# The speed is measured over at least this share of the budget, and this
# many steps, before the steps are estimated from it: the first steps of a
# run (the input's first batches, caches) are slower than the rest, and an
# estimate too low ends training before the budget does.
MEASURED_SHARE, MEASURED_STEPS = 0.05, 20


class BudgetAnneal(keras.callbacks.Callback):
    """Sets an `Annealed` schedule's `total_steps` and stops training there.

    With known steps (`known_steps`, the updates of every epoch) that is
    the total. Under a time budget the total is estimated from the speed
    measured since this run's first step, in steps a second of the
    budget's clock (which counts evaluations as the budget does): once
    after the schedule's warm-up, at the end of each evaluation, and once
    where the planned anneal begins (the speed then measured over most of
    the budget); training ends at the estimated step, or at the budget's
    end if that comes first. The plan and its estimates are saved with
    every backup (`save_state`), so a resumed run starts from the plan of
    its save and estimates again only where the uninterrupted run would
    (a run of known steps makes no estimate and resumes bit for bit).

    `end_early` lets `KeepBest`'s patience start the anneal instead of
    stopping: the run ends annealed, with the anneal's share of its steps.

    With several workers only the chief's estimates count: it sends them
    through `kseq.training.devices.distribution.WorkersAgree` (`pending`,
    `agree`), and every worker applies them at the same step.

    Args:
        schedule: the optimizer's `Annealed` schedule.
        budget_seconds: the time budget, or None.
        known_steps: the updates of the whole training where known, or None.
        clock: `() -> seconds of the budget spent` (runs before a resume
            included), read at batch and evaluation ends.
        agreed: whether the workers agree on the estimates (several workers).
    """

    FILE = "anneal.json"

    def __init__(self, schedule, budget_seconds=None, known_steps=None, clock=None, agreed=False):
        super().__init__()
        self.schedule, self.budget, self.clock, self.agreed = schedule, budget_seconds, clock, agreed
        self.known = known_steps
        self.state = {"total_steps": known_steps or 0, "estimates": [], "patience_step": None,
                      "estimated_at_start": False}
        self.pending = 0  # the chief's estimate not yet applied, with several workers

    def save_state(self, folder):
        """Writes the plan into a backup's save being written (`ResumableBackup`).

        Args:
            folder: the save's folder.
        """
        write_json_atomic(os.path.join(folder, self.FILE), self.state)

    def restore_state(self, folder):
        """Continues the plan `save_state` wrote into `folder`; a save without one starts afresh.

        Args:
            folder: the save's folder.
        """
        path = os.path.join(folder, self.FILE)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                self.state.update(json.load(f))

    def on_train_begin(self, logs=None):
        self.schedule.total_steps.assign(float(self.state["total_steps"]))
        self._reference, self._ended = None, False

    def on_train_batch_end(self, batch, logs=None):
        step = global_step(self.model)
        if self.budget:
            now = self.clock()
            total = self.state["total_steps"]
            if self._reference is None:
                self._reference = (step, now)  # after this run's first step: its tracing is not the speed
            elif not self.state["estimates"] and step >= self.schedule.warmup_steps:
                self._estimate(step, now)
            elif total and step >= self._start(total) and not self.state["estimated_at_start"]:
                self.state["estimated_at_start"] = self._estimate(step, now)
        total = self.state["total_steps"]
        if total and step >= total and not self._ended:
            self._ended = self.model.stop_training = True
            print(f"\nthe learning rate's anneal ended at step {step}")

    def on_epoch_end(self, epoch, logs=None):
        stopping = self.model.stop_training and not ends_epoch_only(self.model)  # the last evaluation
        if self.budget and self._reference is not None and not stopping:
            self._estimate(global_step(self.model), self.clock())

    def _estimate(self, step, now):
        """Estimates the last step from the speed so far, where it was
        measured long enough; returns whether it did."""
        first_step, first_time = self._reference
        if step - first_step < MEASURED_STEPS or now - first_time < MEASURED_SHARE * self.budget:
            return False
        speed = (step - first_step) / (now - first_time)
        total = max(self._capped(step + int(speed * max(self.budget - now, 0.0))), step + 1)
        self.state["estimates"].append([step, total])
        print(f"learning rate: {speed:.2f} steps a second of the budget, so the anneal ends at step {total} "
              f"(from step {self._start(total)})", flush=True)
        if self.agreed:
            self.pending = total
        else:
            self._plan(total)
        return True

    def _capped(self, total):
        """`total`, or the known steps or patience's end where sooner."""
        caps = [total] + ([self.known] if self.known else [])
        if self.state["patience_step"] is not None:
            caps.append(self._patience_total())
        return min(caps)

    def _patience_total(self):
        return math.ceil(self.state["patience_step"] / (1.0 - self.schedule.share))

    def _start(self, total):
        return math.ceil(total - self.schedule.share * total)

    def _plan(self, total):
        self.state["total_steps"] = int(total)
        self.schedule.total_steps.assign(float(total))

    def agree(self, total):
        """Applies the chief's estimate on every worker, at the same step.

        Args:
            total: the chief's `pending` estimate; 0 for none.
        """
        self.pending = 0
        if total:
            self._plan(self._capped(int(total)))

    def end_early(self, step):
        """Anneals now instead of stopping, where patience ran out (`KeepBest`).

        The run then ends at the step whose last `share` begins here (or
        where the anneal already planned ends, if that is sooner).

        Args:
            step: the global step of the evaluation.

        Returns:
            Whether the anneal ends the run (training goes on); False
            where no plan is known yet (training stops as without it).
        """
        total = self.state["total_steps"]
        if not total:
            return False
        if step < self._start(total):
            self.state["patience_step"] = step
            self._plan(min(total, self._patience_total()))
            print(f"annealing the learning rate from here instead of stopping: training ends at step "
                  f"{self.state['total_steps']}")
        return True

    def report(self):
        """metrics.json's entries on the anneal: the last step planned, the
        estimates ([step, last step] each) and the step where patience began it."""
        return {"lr_anneal_total_steps": self.state["total_steps"] or None,
                "lr_anneal_estimates": self.state["estimates"],
                "lr_anneal_patience_step": self.state["patience_step"]}


def anneal_decision(schedule, budget_minutes, known_steps):
    """Describes what the learning rate's anneal does in a run, as a `Decision` "lr_anneal".

    Args:
        schedule: the optimizer's `Annealed` schedule, or None (`--anneal 0`).
        budget_minutes: `--max-minutes`, or None.
        known_steps: whether the run's steps are known before it starts
            (not for streamed data, whose length is read as it trains).

    Returns:
        The decision: the anneal's share of the steps (0: none) and why.
    """
    if schedule is None:
        return Decision("lr_anneal", 0.0, "--anneal 0: the rate is not annealed")
    where = f"{schedule.shape} to 0 over the last {schedule.share:.0%} of the steps"
    details = {"lr_anneal_shape": schedule.shape}
    if budget_minutes:
        return Decision("lr_anneal", schedule.share, f"{where} the {budget_minutes:g}-minute budget allows, "
                        "estimated from the speed after warm-up, at each evaluation and where the anneal begins; "
                        "training ends there", details)
    if known_steps:
        return Decision("lr_anneal", schedule.share, f"{where} of --epochs", details)
    return Decision("lr_anneal", 0.0, "not annealed: without --max-minutes the steps of streamed data are not "
                    "known before training", details)


def planned_anneal(model, budget_minutes, total_batches, clock):
    """Makes the `BudgetAnneal` of a model's `Annealed` learning rate, where it anneals.

    Args:
        model: the compiled model.
        budget_minutes: `--max-minutes`, or None.
        total_batches: the batches of every epoch, or None for streamed data.
        clock: `() -> seconds of the budget spent`.

    Returns:
        The callback; None without an `Annealed` rate, or without a budget
        or a known number of steps to plan.
    """
    schedule = annealed_schedule(model.optimizer)
    if schedule is None or not (budget_minutes or total_batches):
        return None
    accumulate = getattr(model.optimizer, "gradient_accumulation_steps", None) or 1
    return BudgetAnneal(schedule, budget_minutes and 60.0 * budget_minutes,
                        total_batches // accumulate if total_batches else None,  # updates, not batches
                        clock=clock, agreed=workers(model.distribute_strategy) > 1)
