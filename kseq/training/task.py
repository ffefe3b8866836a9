"""The steps every task shares, named once, so that a task's `main` reads
as its own choices between them (as OpenNMT-tf's runner names train,
evaluate, export):

    task.name_xla_cache(options)                # first: TensorFlow reads XLA's flags at its first device query
    run = task.start(options, jit)              # strategy, precision, seed, logdir, XLA cache
    tokenizer = run.tokenizer(texts, resuming)  # resumed, --init-from's, --tokenizer's, or trained
    model = run.compile(build, metrics)         # built and compiled under the strategy
    trained = run.train_once("trained", fit, lambda: run.fit(fit, model, train, valid), build)
    run.write_metrics({...}, scores=(...))      # metrics.json, test scores in TensorBoard
    run.export(lambda: export_...(...), {"input": [...]})  # once; then called as TF Serving would

Each step that a restart must not repeat is a phase (`Run.phases`,
`kseq.training.checkpoints.Phases`): training, exports, and the task's own
(`run.phases.once(name, compute)`).
"""

import dataclasses
import os
import time

import keras
import tensorflow as tf

from kseq._atomic import write_json_atomic
from kseq._compat import accumulate_after_all_reduce
from kseq._saved_model import load_saved_model
from kseq.training.checkpoints import failed_start
from kseq.training.checkpoints.phases import Phases
from kseq.training.config.config_files import write_config
from kseq.training.config.options import config_values
from kseq.training.config.warm_start import init_weights
from kseq.training.config.warm_start import describe as describe_init
from kseq.training.devices.distribution import clip_after_all_reduce, is_chief, make_strategy, task
from kseq.training.devices.precision import describe_precision, resolve_precision
from kseq.training.devices.xla import check_replicas, enable_persistent_cache, jit_decision
from kseq.training.devices.xla_compile_flags import configure_compilation, describe as describe_compilation
from kseq.training.loop.fit import Fit
from kseq.training.loop.periods import StepTensorBoard
from kseq.training.loop.step_curves import StepCurves
from kseq.training.loop.trained import Trained, train_once
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from kseq.training.objectives.optimizers import FusedAdam
from kseq.training.objectives.schedules import Annealed
from kseq.training.reporting.decisions import as_hparams
from kseq.training.reporting.tensorboard import write_hparams, write_scores
from kseq.training.vocabulary import run_tokenizer


class Run:
    """One run of a task: its options, where it runs, and the shared steps.

    Attributes:
        options: the task's options.
        jit: the `JitDecision` for the train step (XLA off where the
            strategy's CPU replicas cannot run it, `check_replicas`).
        strategy: the tf.distribute strategy; `chief`: whether this process
            writes logs, checkpoints, metrics.json and exports.
        workdir: the logdir, or this worker's folder under it.
        precision: the resolved `Precision`; `xla_cache`: the persistent
            XLA cache folder (None where nothing compiles).
        phases: the finished steps a restart skips.
        start_record: what the logdir held before the run wrote there,
            undone when a user's mistake stops kseq-train before the run
            trains (`kseq.training.checkpoints.failed_start`; None when
            nothing would undo it).

    Args:
        options: the task's parsed options.
        jit: the `JitDecision` for the train step (with `compiled_blocks`,
            the Transformer's blocks compile: the XLA cache is named too).
        compiles: whether anything else is compiled with XLA. Default False.
        bfloat16_cpu: whether "auto" precision picks mixed_bfloat16 on a CPU
            with bfloat16 units. Default False. See `start`.
    """

    def __init__(self, options, jit, compiles=False, bfloat16_cpu=False):
        self.started = time.monotonic()
        self.options = options
        # The cache's flag is set already (`name_xla_cache`); this names the folder in use.
        compiles = compiles or jit.use or jit.compiled_blocks
        self.xla_cache = enable_persistent_cache(options.xla_cache) if compiles else None
        if self.xla_cache:
            print(describe_compilation(configure_compilation(self.xla_cache)))
        # Then a multi-worker strategy sets up collectives before other TensorFlow work.
        self.strategy = make_strategy(options.strategy)
        self.chief = is_chief(self.strategy)
        task_type, task_id = task(self.strategy)
        print(f"strategy: {type(self.strategy).__name__} with {self.strategy.num_replicas_in_sync} "
              "replica(s)" + ("" if self.chief else f"; this is {task_type} {task_id}: logs and "
                              "exports are the chief's"))
        self.jit = check_replicas(jit, self.strategy)
        self.precision = resolve_precision(options.precision, bfloat16_cpu=bfloat16_cpu)
        print(describe_precision(self.precision))
        if options.init_from:
            print(describe_init(options))
        keras.utils.set_random_seed(options.seed)
        # Other workers keep their own files, as on separate disks.
        self.workdir = options.logdir if self.chief else os.path.join(
            options.logdir, "workers", f"{task_type}-{task_id}")
        self.start_record = failed_start.starting(options.logdir)
        os.makedirs(self.workdir, exist_ok=True)
        if self.chief:
            write_config(config_values(options), options.logdir)
        self.phases = Phases(self.workdir)

    @property
    def seconds(self):
        """Seconds since the run started."""
        return time.monotonic() - self.started

    def decisions(self, model):
        """Lists the run's auto choices as they ran.

        Args:
            model: the compiled model, whose `jit_compile` keras decided.

        Returns:
            [the precision's `Decision`, XLA's `Decision` as keras runs it for `model`].
        """
        return [self.precision.as_decision(), jit_decision(model, self.jit)]

    def tokenizer(self, texts, resuming, cache=None):
        """The run's tokenizer: the one a resumed run saved in its workdir,
        else `--init-from`'s, `--tokenizer PATH`'s, or a SentencePiece
        vocabulary trained on `texts` (`--vocab-size`; "auto": sized to the
        texts, at most `--max-vocab-size`). Its files go to the workdir.

        Args:
            texts: the training texts the vocabulary is trained on.
            resuming: whether this run goes on from an earlier one.
            cache: a folder of the data's own (the corpus scan's) where a
                vocabulary trained on `texts` is kept for the next run.

        Returns:
            The tokenizer.
        """
        options = self.options
        return run_tokenizer(texts, self.workdir, resuming=resuming, path=options.tokenizer,
                             init_from=options.init_from, vocab_size=options.vocab_size,
                             max_vocab_size=getattr(options, "max_vocab_size", None), cache=cache)

    def compile(self, build, metrics=(), loss=None, optimizer=None):
        """A model built and compiled under the strategy.

        The replicas' summed gradient is clipped (`--clipnorm`, as on one
        device); `--accumulate` N updates once every N batches with their
        mean gradient; `--init-from` loads a finished run's weights.

        Args:
            build: `() -> model`, unbuilt (kseq's models build without shapes),
                or built (a pretrained one).
            metrics: keras metrics.
            loss: default `MaskedSparseCategoricalCrossentropy()`.
            optimizer: `() -> optimizer`, called under the strategy; default
                `FusedAdam(--learning-rate)` clipping `--clipnorm`, annealed
                as `learning_rate` says.

        Returns:
            The compiled model.
        """
        options = self.options
        with self.strategy.scope():
            model = build()
            if not model.built:  # a pretrained model comes built, its weights loaded
                model.build()  # variables under the strategy, before fit or a restore
            adam = optimizer() if optimizer else FusedAdam(self.learning_rate(options.learning_rate),
                                                           global_clipnorm=options.clipnorm)
            return compile_model(model, adam, loss or MaskedSparseCategoricalCrossentropy(), metrics,
                                 jit_compile=self.jit.use, accumulate=options.accumulate, init_from=options.init_from)

    def learning_rate(self, rate):
        """The learning rate annealed to 0 over the last `--anneal` of the
        training's steps (`Annealed`, whose steps `Fit` plans); `rate`
        itself under `--anneal 0`. Call it under `strategy.scope()`.

        Args:
            rate: a schedule, or a constant rate.

        Returns:
            The rate to build the optimizer with.
        """
        share = self.options.anneal
        return Annealed(rate, share, self.options.anneal_shape) if share else rate

    def make_fit(self, folder=None, monitor=None, mode="min", patience=0):
        """Makes the `kseq.training.loop.Fit` of the options' cadence.

        The cadence is `--epochs`, `--max-minutes`, `--eval-every` and
        `--save-every`. Create it before the data: the training pipeline
        starts from its `position`.

        Args:
            folder: a subfolder of the workdir for its backup; None (default):
                the workdir itself.
            monitor: a logged score, such as "val_loss", whose best
                evaluation's weights are kept; None (default) for none.
            mode: "min" (default) or "max": which way `monitor` improves.
            patience: evaluations without a better `monitor` before training
                stops; 0 (default) never stops for that.

        Returns:
            The `Fit`.
        """
        options = self.options
        workdir = os.path.join(self.workdir, folder) if folder else self.workdir
        return Fit(workdir, options.cadence, options.save_steps, options.max_minutes, monitor, mode, patience)

    def fit(self, fit, model, train, valid, logging=(), stopping=(), logdir=None, hparams=None, hparams_dir=None,
            decisions=(), examples=None, batches=None, save=True, units="examples"):
        """Trains with `fit.fit`, the chief writing TensorBoard's HParams, curves and `logging`.

        Curves are written at the global step: keras' at each evaluation,
        the train ones every `--log-every` steps (`StepCurves`). HParams hold
        the options and decisions, the learning rate's anneal and the train
        curves' cadence among them: written once the cadence is decided (a
        resumed run that keeps it writes none).

        Args:
            fit: the task's `kseq.training.loop.Fit`.
            model, train, valid: the compiled model and its data.
            logging: the chief's other callbacks (samples, scores, maps).
            stopping: callbacks whose state the backup keeps.
            logdir: TensorBoard's folder (default: `--logdir`).
            hparams: entries beside the options' in HParams; False: none.
            hparams_dir: where HParams go (default: `logdir`).
            decisions: the task's own `Decision`s, before the run's.
            examples: what the training position counts ("pairs", "texts",
                "tokens"): printed as read by this worker; None: not printed.
            batches: an epoch's batches, described in the opening line.
            save: write `<logdir>/model.keras` (the kept weights) after.
            units: what the train curves' rate counts: "examples" (default)
                or "tokens" (real label tokens, from a `MaskedTokenMean` metric).

        Returns:
            `Trained` (model, decisions, fit's metrics).
        """
        failed_start.training(self.start_record)  # from here on what the run writes is its training's
        logdir = logdir or self.options.logdir
        decisions = [*decisions, *self.decisions(model), fit.anneal_decision(model)]
        callbacks, curves = [], None
        if self.chief:
            values = self.options.as_hparams() | (hparams or {}) | as_hparams(decisions)

            def write_settings(cadence):
                write_hparams(hparams_dir or logdir, values | as_hparams([cadence]))

            board = StepTensorBoard(logdir, profile_batch=self.options.profile_batch)
            curves = StepCurves(board, self.options.log_every, fit.expected_steps, units,
                                on_decided=write_settings if hparams is not False else None)
            # The logging callbacks first: the scores they add to an evaluation's logs reach the curves.
            callbacks = [*logging, curves, board]
        metrics = fit.fit(model, train, valid, self.options.epochs, callbacks, stopping, batches=batches)
        if curves and curves.decision:
            decisions.append(curves.decision)
        if examples:
            print(f"this worker read {fit.position.pairs_read():,} training {examples} from the files")
        if save and self.chief:
            model.save(os.path.join(logdir, "model.keras"))
        return Trained(model, decisions, metrics)

    def train_once(self, name, fit, train, build=None, keep=True, logdir=None):
        """Phase `name`'s `Trained`, trained once.

        The first time, `train()` returns it; with `keep`, the chief writes
        its weights and options to `logdir` (default `--logdir`: what
        `--init-from` reads); then the phase is recorded with its metrics
        (the decisions among them) and `fit`'s backup released. After a
        restart, the record's metrics come back with the model `build()`
        makes, loaded with those weights (or no model, without `keep`).

        Args:
            name: the phase's name, such as "trained".
            fit: the task's `kseq.training.loop.Fit`.
            train: `() -> Trained`, the training itself.
            build: `() -> model`, unbuilt, for a restart; None (default)
                where `keep` is False.
            keep: write the weights and options for `--init-from`. Default True.
            logdir: where they go; None (default): `--logdir`.

        Returns:
            `Trained`.
        """
        options = dataclasses.replace(self.options, logdir=logdir or self.options.logdir) if keep else None
        if self.phases.get(name) is not None:
            failed_start.training(self.start_record)  # trained before: the folder holds a run
        return train_once(self.phases, name, fit, train, options, build, self.chief, lambda: self.seconds)

    def write_metrics(self, metrics, scores=()):
        """Writes `<logdir>/metrics.json`, whole or not at all.

        The entries named in `scores` are also logged as scalars of run
        `<logdir>/test` (without their "test_"), at the step training
        reached: TensorBoard's HParams dashboard lists them beside the run's
        settings.

        Args:
            metrics: {name: JSON-serialisable value}; `metrics["steps"]`
                (default 0) is the scores' step.
            scores: names of entries to log as scores, such as "test_bleu".
                Default none.

        Returns:
            `metrics`.
        """
        logdir = self.options.logdir
        write_json_atomic(os.path.join(logdir, "metrics.json"), metrics)
        if scores:
            values = {name.removeprefix("test_"): metrics[name] for name in scores}
            write_scores(logdir, "test", values, step=metrics.get("steps", 0))
        return metrics

    def export(self, write, sample, phase="export"):
        """Exports once, then loads the export as TF Serving would and calls it on `sample`.

        Prints the answer.

        Args:
            write: `() -> path` (or {"path": path}), writing the export.
            sample: {input name: list of strings} to call it on.
            phase: the phase's name. Default "export".

        Returns:
            The export's path.
        """
        path = self.phases.once(phase, write)
        path = path["path"] if isinstance(path, dict) else path  # as earlier versions recorded it
        serve_sample(path, sample)
        return path

    def done(self):
        """Prints where TensorBoard reads this run."""
        print(f"TensorBoard: tensorboard --logdir {self.options.logdir}")


def name_xla_cache(options):
    """Points XLA's persistent cache at `--xla-cache` (`enable_persistent_cache`).

    Call it before anything asks TensorFlow for its devices: TensorFlow
    reads XLA's flags at the first query and ignores later changes, and the
    "auto" decisions (`decide_jit_compile`, `device_class`) ask. Where
    nothing compiles the cache stays an empty folder; `Run` reports it where
    something does.

    Args:
        options: the task's parsed options.
    """
    enable_persistent_cache(options.xla_cache)


def start(options, jit, compiles=False, bfloat16_cpu=False):
    """Sets up a run; call it before any other TensorFlow work.

    Args:
        options: the task's parsed options.
        jit: the `JitDecision` for the train step.
        compiles: whether anything else is compiled with XLA (decoding on
            a GPU): compiled programs then go to the persistent cache too.
        bfloat16_cpu: what was measured of the task's model under
            mixed_bfloat16 on a CPU with bfloat16 units; "auto" precision
            picks it there only for True (`resolve_precision`).

    Returns:
        `Run`.
    """
    return Run(options, jit, compiles, bfloat16_cpu)


def compile_model(model, optimizer, loss, metrics=(), jit_compile=False, accumulate=1, init_from=None):
    """Compiles `model` (built under the run's strategy scope) so that the
    replicas' summed gradient is clipped, as on one device
    (`clip_after_all_reduce`).

    Args:
        model, optimizer, loss, metrics: as `keras.Model.compile` takes them.
        jit_compile: compile the train step with XLA.
        accumulate: > 1: the optimizer updates once every `accumulate`
            batches with their mean gradient (`accumulate_after_all_reduce`;
            its `iterations` counts updates).
        init_from: a finished run's logdir whose weights the model starts
            from (`kseq.training.config.warm_start`).

    Returns:
        `model`.
    """
    if accumulate > 1:
        optimizer = accumulate_after_all_reduce(optimizer, accumulate)
    else:
        optimizer = clip_after_all_reduce(optimizer)
    model.compile(optimizer=optimizer, loss=loss, metrics=list(metrics), jit_compile=jit_compile)
    if init_from:
        init_weights(model, init_from)
    return model


def serve_sample(path, inputs):
    """Loads the export at `path` as TF Serving would and calls its `serving_default`.

    Prints the first answer of each output.

    Args:
        path: the SavedModel folder.
        inputs: {input name: list of strings (or bytes)}.

    Returns:
        {output name: numpy array}.
    """
    served = load_saved_model(path).signatures["serving_default"]
    outputs = {name: value.numpy() for name, value in served(
        **{name: tf.constant(values) for name, values in inputs.items()}).items()}
    shown = {name: [v.decode() if isinstance(v, bytes) else v for v in value.tolist()][:1]
             for name, value in outputs.items() if name != "token_ids"}
    first = next(iter(inputs.values()))[0]
    print(f"exported {path}: {f'({len(first):,} bytes)' if isinstance(first, bytes) else repr(first)} -> {shown}")
    return outputs

