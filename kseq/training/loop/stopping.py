"""Training until a validation score stops improving, keeping the best
weights, in a way that survives a killed and resumed run."""

import json
import math
import os
import shutil

import keras
import numpy as np

from kseq._atomic import write_json_atomic
from kseq._validation import check_choice, check_float, check_positive_int
from kseq.training.progress import global_step


class KeepBest(keras.callbacks.Callback):
    """Keeps the weights of the best evaluation; stops after `patience`
    evaluations without improvement; restores the best weights at the end.

    With `lr_factor` (the variable of a `kseq.training.objectives.schedules.Scaled`
    learning rate), an evaluation that falls more than `tolerance` (a
    fraction of the best score) below the best also takes training back to
    the best weights and multiplies the learning rate by `decay`: a rate too
    high for the data (the validation score falls after the warm-up) costs
    an evaluation period, not the run. The tolerance keeps the noise of a
    few hundred decoded sentences from reverting a run that is still
    learning.

    Unlike keras' EarlyStopping (which holds the best weights in memory),
    the best weights and the patience count live in `folder`
    (`best_weights.npz`, `best.json`), so a run killed and resumed with
    `resume=True` stops and restores as one uninterrupted run would. Only
    the model's weights are kept (not the optimizer's step or moments, as
    a `.weights.h5` file would). Both files go once training ends: a run
    that ended has nothing to resume.
    Place it after the callbacks that add `monitor` to the epoch's logs.
    Where the learning rate anneals (`anneal`, a
    `kseq.training.loop.anneal.BudgetAnneal`, which `Fit` sets), patience
    starts the anneal instead of stopping, and does not stop a run that is
    annealing already: the run ends when the anneal does.

    Args:
        monitor: the log key, e.g. "val_chrf" or "val_loss".
        folder: where the best weights and the state are written.
        mode: "max" (a score) or "min" (a loss).
        patience: evaluations without improvement before stopping (0: never
            stop, only keep the best).
        resume: continue the state found in `folder` (else start afresh).
        lr_factor: a scalar variable multiplying the learning rate, or None.
        decay: what `lr_factor` is multiplied by at each fall.
        tolerance: how far below the best (a fraction of it) a score must
            fall to revert. Defaults to 0.02.
        noise: optionally `noise(best) -> a fall (in the score's units)
            that sampling alone can explain`; a score must also fall further
            than that to revert (e.g. two standard errors of an exact match
            on a few hundred sentences).
    """

    def __init__(self, monitor, folder, mode="max", patience=0, resume=False, lr_factor=None, decay=0.5,
                 tolerance=0.02, noise=None):
        super().__init__()
        self.monitor, self.mode = monitor, mode
        self.patience = check_positive_int("patience", patience, allow_zero=True)
        self.sign = {"max": 1.0, "min": -1.0}[check_choice("mode", mode, ("max", "min"))]
        self.weights_path = os.path.join(folder, "best_weights.npz")
        self.state_path = os.path.join(folder, "best.json")
        os.makedirs(folder, exist_ok=True)
        self.lr_factor = lr_factor
        self.decay = check_float("decay", decay, 0.0, 1.0, low_open=True)
        self.tolerance = check_float("tolerance", tolerance, 0.0)
        self.noise = noise
        self.anneal = None
        self.state = {"best": None, "best_step": None, "best_evaluation": None, "best_logs": {}, "wait": 0,
                      "evaluations": 0, "scores": [], "stopped_early": False, "lr_factor": 1.0, "reverts": 0}
        if resume and os.path.exists(self.state_path):
            with open(self.state_path, encoding="utf-8") as f:
                self.state.update(json.load(f))
        elif os.path.exists(self.state_path):
            os.remove(self.state_path)

    def on_train_begin(self, logs=None):
        if self.lr_factor is not None:  # a resumed run continues the lowered rate
            self.lr_factor.assign(self.state["lr_factor"])

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        state, value = self.state, float(value)
        state["evaluations"] += 1
        state["scores"].append(value)
        if state["best"] is None or self.sign * (value - state["best"]) > 0:
            temporary = self.weights_path + ".partial.npz"
            np.savez(temporary, *self.model.get_weights())
            os.replace(temporary, self.weights_path)
            state.update(best=value, best_step=global_step(self.model), best_evaluation=state["evaluations"],
                         best_logs={key: float(v) for key, v in logs.items() if key.startswith("val_")}, wait=0)
        else:
            state["wait"] += 1
            if self.patience and state["wait"] >= self.patience:
                if self.anneal is None or not self.anneal.end_early(global_step(self.model)):
                    state["stopped_early"] = self.model.stop_training = True
                    print(f"{self.monitor} has not improved for {state['wait']} evaluations: stopping")
            elif self.lr_factor is not None and self._fell(value):
                self._restore()
                state["lr_factor"] *= self.decay
                state["reverts"] += 1
                self.lr_factor.assign(state["lr_factor"])
                print(f"{self.monitor} fell: back to step {state['best_step']}'s weights, "
                      f"learning rate x{state['lr_factor']:g}")
        write_json_atomic(self.state_path, state)

    def _fell(self, value):
        best = self.state["best"]
        allowed = max(self.tolerance * abs(best), self.noise(best) if self.noise else 0.0)
        return self.sign * (best - value) > allowed

    def _restore(self):
        with np.load(self.weights_path) as saved:
            self.model.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])

    def save_state(self, folder):
        """Writes the state and the best weights into a backup's save being written.

        The save (`ResumableBackup(participants=...)`) publishes them with
        the model's weights, so a kill between an evaluation and the next
        save cannot leave them a step apart.

        Args:
            folder: the save's folder.
        """
        write_json_atomic(os.path.join(folder, "best.json"), self.state)
        if os.path.exists(self.weights_path):
            shutil.copyfile(self.weights_path, os.path.join(folder, "best_weights.npz"))

    def restore_state(self, folder):
        """Continues from what `save_state` wrote into `folder`.

        Args:
            folder: the save's folder.
        """
        with open(os.path.join(folder, "best.json"), encoding="utf-8") as f:
            self.state.update(json.load(f))
        saved = os.path.join(folder, "best_weights.npz")
        if os.path.exists(saved):
            temporary = self.weights_path + ".partial.npz"
            shutil.copyfile(saved, temporary)
            os.replace(temporary, self.weights_path)

    def on_train_end(self, logs=None):
        if self.state["best"] is not None:
            self._restore()
            print(f"weights of step {self.state['best_step']} restored "
                  f"(best {self.monitor} {self.state['best']:.4g})")
        for path in (self.weights_path, self.state_path):
            if os.path.exists(path):
                os.remove(path)

    def report(self):
        """Reports what happened, for metrics.json.

        Returns:
            {"monitor", "patience", and the state: best score, step, evaluations, reverts, ...}.
        """
        return {"monitor": self.monitor, "patience": self.patience, **self.state}


def keep_best(options, folder, metric, decoded_pairs, lr_factor=None, resume=False):
    """The `KeepBest` of a task's `StoppingOptions` for `metric`.

    Args:
        options: the task's options (`StoppingOptions` and `strategy`).
        folder: where the best weights and the state go.
        metric: the run's metric; the monitor is `stopping_monitor`'s.
        decoded_pairs: validation pairs decoded at each evaluation (the
            exact match's noise, `sampling_noise`).
        lr_factor: the variable of a `Scaled` learning rate to lower.
        resume: whether a killed run resumes.

    Returns:
        The callback.
    """
    key, mode = stopping_monitor(metric, options.strategy)
    return KeepBest(key, folder, mode=mode, patience=options.patience, resume=resume,
                    lr_factor=None if options.lr_decay == 1 else lr_factor, decay=options.lr_decay,
                    noise=sampling_noise(key, decoded_pairs))


def stopping_monitor(metric, strategy):
    """Chooses the log key training stops on and keeps the best of.

    Exact match of the greedy validation decode where that is the metric
    (short targets: it is what the user wants, and the loss says little
    about it). Otherwise the validation loss: the greedy chrF of a model
    trained for minutes is not monotone in its quality (on the Bible it
    fell between two evaluations while the loss fell and BLEU rose:
    benchmarks/RESULTS.md, "Translation recipe"). With several workers
    always the loss: the decoded metric is the chief's alone, and every
    worker must stop together.

    Args:
        metric: the run's metric, such as "exact_match" or "chrf".
        strategy: the `--strategy` name, such as "multiworker".

    Returns:
        (log key, mode): ("val_exact_match", "max") or ("val_loss", "min").
    """
    if metric == "exact_match" and strategy != "multiworker":
        return "val_exact_match", "max"
    return "val_loss", "min"


def sampling_noise(monitor_key, sentences):
    """Makes `KeepBest`'s `noise`: how far an exact match falls by chance.

    That is two binomial standard errors at the best score, on `sentences`
    decoded validation pairs: without it, a fall that chance explains on a
    few hundred pairs could revert a run that is still learning (seen on
    benchmarks/user_tasks.py's numbers task).

    Args:
        monitor_key: the stopping log key.
        sentences: validation pairs decoded at each evaluation.

    Returns:
        A function of the best exact match (in %) giving the fall (in
        points) chance explains; None for the loss, which covers every
        validation pair.

    Example:
    >>> round(sampling_noise("val_exact_match", 200)(75.0), 2)
    6.12
    """
    if monitor_key != "val_exact_match":
        return None
    return lambda best: 200.0 * math.sqrt(max(best, 0.0) / 100 * max(100 - best, 0.0) / 100 / sentences)
