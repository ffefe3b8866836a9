"""Where kseq leans on private keras or TensorFlow behaviour, in one place.

Each function names the upstream behaviour it depends on and the versions
it was checked on (keras 3.15.1, TensorFlow 2.21.0); tests/test_compat.py
holds a test per entry that fails once upstream changes, so an upgrade says
which entry to revisit.
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

import importlib

import keras
import tensorflow as tf


def keras_uses_cudnn(layer):
    """Tells whether keras runs this LSTM/GRU layer's sequences with cuDNN.

    keras 3.15 picks cuDNN by itself (`use_cudnn="auto"`) when a GPU is
    visible and the cell has cuDNN's activations, bias and (for GRU)
    `reset_after`; the decision lives in the private
    `keras.src.backend.tensorflow.rnn.cudnn_ok`, which this asks.

    Args:
        layer: a keras layer; any layer but an LSTM or GRU gives False.

    Returns:
        True if keras would run it with cuDNN.
    """
    if not isinstance(layer, (keras.layers.LSTM, keras.layers.GRU)):
        return False
    if layer.use_cudnn is False or layer.cell.recurrent_dropout:
        return False
    cell = layer.cell
    reset_after = getattr(cell, "reset_after", None) if isinstance(layer, keras.layers.GRU) else None
    return bool(
        _keras_tensorflow_rnn().cudnn_ok(
            cell.activation, cell.recurrent_activation, layer.unroll, cell.use_bias, reset_after
        )
    )


def cudnn_trains_in(compute_dtype):
    """Tells whether an LSTM/GRU computing in `compute_dtype` may run on cuDNN.

    Not in bfloat16: TensorFlow 2.21's CudnnRNNV3 gradient in bfloat16 reads
    memory it never wrote. Seen on an H100 (tests/test_gpu.py): after freeing
    NaN-filled tensors, every weight gradient of a keras LSTM or GRU was
    NaN on every try, with or without a mask, while the forward pass,
    float16 and float32 stayed finite; keras' portable loop stayed finite.

    Args:
        compute_dtype: the layer's compute dtype (a name or a `tf.DType`).

    Returns:
        False for bfloat16, else True.
    """
    return tf.as_dtype(compute_dtype) != tf.bfloat16


def _keras_tensorflow_rnn():
    # The package's __init__ re-exports a function named `rnn` over the
    # module of the same name, so import the module by its full path.
    return importlib.import_module("keras.src.backend.tensorflow.rnn")


def sublayers(layer):
    """Lists `layer` and every layer under it, depth first.

    It is keras' private `Layer._flatten_layers`, the walk its own
    `model_supports_jit` uses.

    Args:
        layer: a keras layer or model.

    Returns:
        A list of layers, `layer` first.
    """
    return list(layer._flatten_layers(include_self=True, recursive=True))


class _EndOfEpoch:
    """A true `stop_training` that ends only the epoch in progress."""

    def __bool__(self):
        return True


def end_epoch_early(model):
    """Ends the epoch in progress of `model.fit` after this batch, keeping the run going.

    keras 3.15's fit loop leaves an epoch when `stop_training` is
    true after a batch, runs validation and `on_epoch_end`, and only then
    leaves the run if it is still true; `continue_after_epoch` (called in
    an `on_epoch_end`) clears this marker, never a real stop. With
    `steps_per_epoch` set, the next epoch continues the same data iterator.

    Args:
        model: the keras model being fitted; a real stop already set stays.
    """
    if not model.stop_training:
        model.stop_training = _EndOfEpoch()


def ends_epoch_only(model):
    """Tells whether `model.stop_training` is `end_epoch_early`'s marker (not a real stop).

    Args:
        model: a keras model.

    Returns:
        True if only the epoch in progress is to end.
    """
    return isinstance(model.stop_training, _EndOfEpoch)


def continue_after_epoch(model):
    """Clears `end_epoch_early`'s marker (a real stop stays).

    Args:
        model: a keras model.
    """
    if isinstance(model.stop_training, _EndOfEpoch):
        model.stop_training = False


class OptimizerBuiltBeforeTracing:
    """Mixin for keras models: the optimizer is built before the train step traces.

    Without a strategy, keras 3.15 defers the optimizer's build to the first
    train step's trace (`TensorFlowTrainer._maybe_symbolic_build` returns at
    once). Variables created inside a `tf.function` make it trace the step a
    second time, so a model's first `fit` traced its step twice. Under a
    strategy keras builds the optimizer eagerly first; this does the same
    without one, once every layer is built (an unbuilt layer still builds in
    the trace, and the optimizer with it, as keras does). Checked on keras
    3.15.1, TensorFlow 2.21.0.
    """

    def make_train_function(self, force=False):
        optimizer = self.optimizer
        if (optimizer is not None and not optimizer.built and self._distribute_strategy is None
                and all(layer.built for layer in self._flatten_layers())):
            optimizer.build(self.trainable_variables)
        return super().make_train_function(force)


class FirstShardBuild:
    """Mixin for keras models trained under a strategy with several replicas.

    keras 3.15's `fit`/`evaluate` build metrics from the first batch by
    averaging the replicas' shards (`Trainer._maybe_symbolic_build` with
    `strategy.reduce`), which fails when they differ in size (an odd
    bucketed batch) and turns int ids into floats. The first replica's shard
    has the same structure and dtypes, so that is what is used.
    """

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if strategy is not None and iterator is not None:
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda value: strategy.experimental_local_results(value)[0]
                    if isinstance(value, tf.distribute.DistributedValues) else value,
                    next(batches),
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)


def fix_keras_multi_worker_logs():
    """Lets keras 3.15's `fit` run under MultiWorkerMirroredStrategy.

    keras averages each logged value over the workers with
    `strategy.reduce("MEAN", value, axis=0)` (private
    `keras.src.backend.tensorflow.trainer.reduce_per_replica`), which fails
    on the scalar losses and metrics every model logs ("Invalid reduction
    dimension 0 for input with 0 dimensions", tensorflow/tensorflow#72388;
    checked on keras 3.15.1, TensorFlow 2.21.0). This averages scalars over
    the workers only. `kseq.training.devices.distribution.make_strategy("multiworker")` calls
    it; call it yourself when you create the strategy another way.
    """
    from keras.src.backend.tensorflow import trainer

    keras_reduce = trainer.reduce_per_replica
    if getattr(keras_reduce, "kseq_fix", False):
        return

    def mean(value, strategy):
        rank = strategy.experimental_local_results(value)[0].shape.rank
        return strategy.reduce("MEAN", value, axis=0 if rank else None)

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(lambda value: mean(value, strategy), values)
        return keras_reduce(values, strategy, reduction)

    reduce_per_replica.kseq_fix = True
    reduce_per_replica.keras_original = keras_reduce
    trainer.reduce_per_replica = reduce_per_replica


def clip_after_all_reduce(optimizer):
    """Makes a keras optimizer clip the gradient summed over the replicas, as it would on one device.

    keras 3.15 clips (`clipnorm`, `global_clipnorm`, `clipvalue`) each
    replica's gradient before summing them
    (`BaseOptimizer._backend_apply_gradients` clips, then
    `TFOptimizer._backend_update_step` all-reduces; checked on keras 3.15.1),
    so two replicas with gradients (3, 0) and (0, 4) step by (1, 1) instead
    of (0.6, 0.8). Here the sum is taken first and clipped after, through the
    private `_clip_gradients` and `_all_reduce_sum_gradients`. It changes
    only this object: an optimizer loaded from a `.keras` file needs the
    call again.

    Args:
        optimizer: a keras optimizer, changed in place.

    Returns:
        `optimizer`.
    """
    clip = optimizer._clip_gradients
    all_reduce_sum = optimizer._all_reduce_sum_gradients

    def sum_then_clip(grads_and_vars):
        pairs = list(all_reduce_sum(grads_and_vars))
        return list(zip(clip([grad for grad, _ in pairs]), [var for _, var in pairs]))

    optimizer._clip_gradients = lambda grads: grads
    optimizer._all_reduce_sum_gradients = sum_then_clip
    return optimizer


def accumulate_after_all_reduce(optimizer, steps):
    """Makes a keras optimizer update once every `steps` batches, with their gradients summed over the replicas.

    Each update takes the mean of the `steps` batches' gradients, summed over
    the replicas and clipped after (as `clip_after_all_reduce`).
    keras 3.15's own `gradient_accumulation_steps` puts the replicas'
    all-reduce inside a `cond`, which tf.distribute refuses ("`merge_call`
    called while defining a new graph", under any MirroredStrategy; checked
    on keras 3.15.1). Here every batch all-reduces, and each variable's
    update chooses with a `cond` inside the strategy's `update`, where no
    replica waits for another. The accumulators stay keras' (built by
    `build`, saved with the optimizer), equal on every replica; `iterations`
    counts updates, as in keras, so schedules and Adam's bias correction
    see updates, not batches.

    Args:
        optimizer: a keras optimizer, not built yet and without EMA; changed in place.
        steps: batches per update.

    Returns:
        `optimizer`.

    Raises:
        ValueError: `optimizer` is built already or uses EMA.
    """
    clip, all_reduce_sum = optimizer._clip_gradients, optimizer._all_reduce_sum_gradients
    if optimizer.built or optimizer.use_ema:
        raise ValueError("Gradient accumulation needs an optimizer that is not built yet, without EMA.")
    optimizer.gradient_accumulation_steps = steps

    def apply_gradients(grads, trainable_variables):
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        accumulators = [optimizer._accumulated_gradients[optimizer._get_variable_index(v)].value
                        for v in trainable_variables]
        summed = [tf.convert_to_tensor(g) for g, _ in all_reduce_sum(list(zip(grads, variables)))]
        updating = (optimizer._iterations + 1) % steps == 0
        totals = [a + tf.cast(g, a.dtype) for a, g in zip(accumulators, summed)]
        # Each variable gets its clipped mean on an update, else its running total.
        outgoing = tf.cond(updating, lambda: clip([t / steps for t in totals]), lambda: totals)
        tf.__internal__.distribute.interim.maybe_merge_call(
            update_all, optimizer._distribution_strategy, list(zip(outgoing, variables, accumulators)),
            updating, optimizer.learning_rate)

    def update_all(strategy, triples, updating, learning_rate):
        def update_variable(variable, gradient, flag, rate):
            tf.cond(flag, lambda: optimizer.update_step(gradient, variable, rate), lambda: None)

        def update_accumulator(accumulator, gradient, flag):
            accumulator.assign(tf.where(flag, tf.zeros_like(gradient), gradient))

        for gradient, variable, accumulator in triples:
            strategy.extended.update(variable, update_variable, args=(gradient, updating, learning_rate),
                                     group=False)
            strategy.extended.update(accumulator, update_accumulator, args=(gradient, updating), group=False)

    optimizer._backend_apply_gradients = apply_gradients
    return optimizer


def loss_tracker(model):
    """Gives the running mean of the train loss that keras logs as "loss".

    keras 3.15 keeps it in the private `Trainer._loss_tracker`, a
    `keras.metrics.Mean` whose `total` and `count` add each batch's loss
    weighted by its rows (the first input's leading dimension), reset at
    each epoch's start and by `evaluate` after its `on_test_begin`
    (checked on keras 3.15.1).

    Args:
        model: a compiled keras model.

    Returns:
        The `keras.metrics.Mean`.
    """
    return model._loss_tracker


def tensorboard_train_writer(callback):
    """Gives the `tf.summary` writer of a keras TensorBoard callback's `train` run.

    keras 3.15 makes it on first use through the private `_train_writer`
    and closes it at `on_train_end` (checked on keras 3.15.1).

    Args:
        callback: a `keras.callbacks.TensorBoard` whose model is set.

    Returns:
        The writer.
    """
    return callback._train_writer


def batches_applied(optimizer):
    """Counts the batches `optimizer` has been applied to.

    keras 3.15 counts them in the private `_iterations`; with
    `gradient_accumulation_steps` its public `iterations` counts updates,
    `_iterations // gradient_accumulation_steps` (checked on keras 3.15.1).

    Args:
        optimizer: a keras optimizer.

    Returns:
        The number of batches, an int.
    """
    return int(optimizer._iterations.numpy())


def is_empty_batch(x):
    """Tells whether `x` has a static batch of 0 rows.

    keras 3.15.1's recurrent cells cannot run one: their TensorFlow `ops.add`
    takes the (0, N) recurrent term for a bias ("Biases must be 1D: [0, N]").
    Models return their (0, ...) output directly instead.

    Args:
        x: a tensor, batch first.

    Returns:
        True if its static first dimension is 0.
    """
    return x.shape[0] == 0


def call_recreating_lost_resource(call, recreate):
    """Calls `call()`, and in eager mode once more after `recreate()` if TensorFlow lost the resource behind it.

    tensorflow_text 2.21.1's SentencepieceOp keeps its model in a
    kernel-owned resource, which `tf.random.set_seed` (and
    keras.utils.set_random_seed) drops when it clears the eager kernel
    cache (checked on TensorFlow 2.21.0).

    Args:
        call: `() -> result`.
        recreate: `() -> None`, makes the lost resource again.

    Returns:
        `call()`'s result.

    Raises:
        tf.errors.NotFoundError: the resource is lost while tracing a graph.
    """
    try:
        return call()
    except tf.errors.NotFoundError:
        if not tf.executing_eagerly():
            raise
        recreate()
        return call()


def forget_traced_function(model, name):
    """Makes keras trace `model`'s "train", "test" or "predict" function again.

    keras 3.15 keeps the function it traced (`model.train_function` and the
    like) across `fit` calls, with the variables it captured, so a model that
    swaps a variable its `call` reads must drop it.

    Args:
        model: a keras model.
        name: "train", "test" or "predict".
    """
    setattr(model, f"{name}_function", None)


def resume_fit_at_epoch(model, epoch):
    """Makes the next `fit` start at `epoch`.

    keras 3.15's BackupAndRestore does it through the private
    `Trainer._initial_epoch`, which `fit` reads in place of its
    `initial_epoch` argument.

    Args:
        model: a keras model.
        epoch: the epoch to start at, from 0.
    """
    model._initial_epoch = epoch


def fresh_collective_keys_per_strategy():
    """Gives every new MirroredStrategy of this process its own range of
    collective keys. Each one numbers its collectives from the same keys and
    TensorFlow 2.21 remembers a key's shape for the whole process, so
    strategies created one after another (tests) can collide ("Shape
    mismatch in the collective instance"); TensorFlow's own tests move the
    private `MirroredStrategy._collective_key_base` per strategy. For test
    processes, not for training."""
    from tensorflow.python.distribute import mirrored_strategy

    init = mirrored_strategy.MirroredStrategy.__init__
    if getattr(init, "kseq_fresh_keys", False):
        return

    def fresh(self, *args, **kwargs):
        mirrored_strategy.MirroredStrategy._collective_key_base += 100000
        init(self, *args, **kwargs)

    fresh.kseq_fresh_keys = True
    mirrored_strategy.MirroredStrategy.__init__ = fresh


def align_function_names(multiple=100_000):
    """Moves TensorFlow's process-wide counter of unique ids to its next multiple of `multiple`.

    TensorFlow 2.21 names each traced function `__inference_<name>_<uid>`
    from one counter (private `tensorflow.python.framework.ops.uid`), and
    its persistent XLA cache finds a compiled program by that name. A
    resumed run, whose history before a trace differs (it loaded weights;
    its first evaluation comes after other saves), would name its functions
    otherwise and compile them again. Called right before each compiled
    function's first trace, this makes the name depend on the trace alone.

    Args:
        multiple: the step the counter is rounded up to. Default 100,000.
    """
    from tensorflow.python.framework import ops

    for _ in range(multiple - ops.uid() % multiple):
        ops.uid()


VERIFIED = {"keras": ("3.15.1",), "tensorflow": ("2.21.0",)}


def check_versions():
    """Warns when the installed keras or TensorFlow is not one the entries
    above were checked on: tests/test_compat.py then says which still hold."""
    import warnings

    found = {"keras": keras.__version__, "tensorflow": tf.__version__}
    for package, version in found.items():
        if version not in VERIFIED[package]:
            warnings.warn(
                f"kseq's workarounds for private {package} behaviour (kseq/_compat.py) were "
                f"checked on {package} {', '.join(VERIFIED[package])}; {version} is installed. Run "
                "tests/test_compat.py to see which still apply.",
                stacklevel=2,
            )


check_versions()
