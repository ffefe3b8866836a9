"""tf.distribute strategies for the tasks: one device, local replicas, or
several machines (MultiWorkerMirroredStrategy configured by TF_CONFIG)."""

import hashlib

import keras
import numpy as np
import tensorflow as tf

from kseq._compat import (
    batches_applied,
    clip_after_all_reduce,
    end_epoch_early,
    ends_epoch_only,
    fix_keras_multi_worker_logs,
)
from kseq._validation import check_choice
from kseq.special_ids import PAD_ID

__all__ = [
    "STRATEGIES", "WorkersAgree", "clip_after_all_reduce", "distribute_batches", "distribute_worker_batches",
    "fix_keras_multi_worker_logs", "is_chief", "make_strategy", "share_per_worker", "task", "weights_fingerprint",
    "worker_batches", "workers",
]

STRATEGIES = ("default", "mirrored", "multiworker")


def make_strategy(name):
    """Makes the tf.distribute strategy `--strategy` names.

    Args:
        name: "default" (one device), "mirrored" (every local GPU, or the
            CPU) or "multiworker" (every worker in TF_CONFIG; create it
            before any other TensorFlow work, as collective ops are set up
            at program start).

    Returns:
        The strategy.

    Raises:
        ValueError: `name` is not one of `STRATEGIES`.
    """
    check_choice("strategy", name, STRATEGIES)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        fix_keras_multi_worker_logs()
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def task(strategy):
    """Names this process's task in the strategy's cluster.

    Args:
        strategy: a tf.distribute strategy.

    Returns:
        (task type, task id); ("chief", 0) outside a cluster.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return "chief", 0
    return resolver.task_type, resolver.task_id or 0


def is_chief(strategy):
    """Tells whether this process writes logs, checkpoints and exports.

    Args:
        strategy: a tf.distribute strategy.

    Returns:
        True for the "chief" task (or outside a cluster), or worker 0 when
        the cluster has no chief.
    """
    task_type, task_id = task(strategy)
    if task_type == "chief":
        return True
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def distribute_batches(strategy, dataset):
    """Makes a distributed dataset in which every replica of every worker gets its share of each batch.

    Each worker builds `dataset` itself (same seed, so the same batches),
    then keeps its replicas' slices of every batch: all workers step
    through the same number of batches whatever their shapes (bucketed
    batches of varying size), which collectives need. A slice may be empty
    when a batch has fewer rows than there are replicas; the kseq losses
    divide by the global count of real tokens, so that is harmless.

    Args:
        strategy: the tf.distribute strategy.
        dataset: batches of (features, labels), the same on every worker.

    Returns:
        A distributed dataset.
    """
    def worker_dataset(context):
        replicas = context.num_replicas_in_sync
        local = replicas // context.num_input_pipelines
        sliced = _split_rows(dataset, context.input_pipeline_id * local, local, replicas)
        batches = int(dataset.cardinality())
        # keras reads the per-worker count as steps per epoch: exact only
        # with one replica per worker (unknown otherwise, then keras counts
        # the first epoch, and a resumed epoch restarts from its start).
        if batches >= 0 and local == 1:
            sliced = sliced.apply(tf.data.experimental.assert_cardinality(batches))
        return sliced.with_options(_unsharded())

    return strategy.distribute_datasets_from_function(worker_dataset)


def distribute_worker_batches(strategy, make, filler_rows=0):
    """Makes a distributed dataset in which every worker reads its own data.

    `make((workers, index))` builds this worker's dataset (e.g.
    `kseq.data.streaming.streamed_pair_dataset(..., shard=...)`), whose
    batches its local replicas split by rows.

    Workers' shares make different numbers of batches, and collectives
    need every worker to step together: after its share a worker yields
    filler batches, `filler_rows` rows (0: empty) of one PAD position each,
    which add nothing to kseq's losses (they divide by the global count of
    real tokens), until `WorkersAgree` ends training once every share is
    done. A model that carries its state from batch to batch needs its
    batch's rows: pass them as `filler_rows`.

    Args:
        strategy: the multi-worker strategy.
        make: a function of (workers, this worker's index) giving its dataset.
        filler_rows: rows of each filler batch. Default 0.

    Returns:
        A distributed dataset.
    """
    def worker_dataset(context):
        dataset = make((context.num_input_pipelines, context.input_pipeline_id))
        empty = tf.nest.map_structure(
            lambda spec: tf.fill([filler_rows] + [1] * (spec.shape.rank - 1), tf.constant(PAD_ID, spec.dtype)),
            dataset.element_spec)
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(empty).repeat())
        local = context.num_replicas_in_sync // context.num_input_pipelines
        if local > 1:
            dataset = _split_rows(dataset, 0, local, local)
        return dataset.with_options(_unsharded())

    return strategy.distribute_datasets_from_function(worker_dataset)


def worker_batches(strategy, make, filler_rows=0):
    """Makes this process's training batches.

    Under a MultiWorkerMirroredStrategy each worker reads its own share,
    `make((workers, index))`, through `distribute_worker_batches`;
    otherwise `make((1, 0))`, whose batches keras splits among the local
    replicas.

    Args:
        strategy: the tf.distribute strategy.
        make: a function of (workers, this worker's index) giving a dataset.
        filler_rows: rows of each filler batch (`distribute_worker_batches`).
            Default 0.

    Returns:
        A dataset, or a distributed dataset under multiworker.
    """
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return distribute_worker_batches(strategy, make, filler_rows)
    return make((1, 0))


def share_per_worker(flag, value, strategy):
    """Shares a batch-size option among the workers; every worker's own batches then hold its share.

    Args:
        flag: the option's flag, for the message, e.g. "--batch-size".
        value: examples or tokens a global batch.
        strategy: the tf.distribute strategy.

    Returns:
        `value // workers`.

    Raises:
        SystemExit: there are more workers than `value`.
    """
    count = workers(strategy)
    if value < count:
        raise SystemExit(f"{flag} {value} shared by {count} workers leaves some none: raise it to {count} or more")
    return value // count


def _split_rows(dataset, first, local, replicas):
    """Each (features, labels) batch cut by rows into `replicas` slices,
    this worker's `local` ones from slice `first`, one element each."""

    def slices(features, labels):
        rows = tf.shape(labels, out_type=tf.int64)[0]

        def piece(replica):
            start, end = (rows * replica) // replicas, (rows * (replica + 1)) // replicas
            return tf.nest.map_structure(lambda x: x[start:end], (features, labels))

        return tf.data.Dataset.range(first, first + local).map(piece)

    return dataset.flat_map(slices)


def _unsharded():
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def workers(strategy):
    """Counts the worker processes of `strategy`'s cluster, chief included.

    Args:
        strategy: a tf.distribute strategy.

    Returns:
        The count; 1 outside a cluster.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    jobs = resolver.cluster_spec().as_dict()
    return max(1, sum(len(jobs.get(name, ())) for name in ("chief", "worker")))


class WorkersAgree(keras.callbacks.Callback):
    """Makes the decisions of every step the same on every worker of a
    MultiWorkerMirroredStrategy, as collectives need: the chief's clock ends
    periods of minutes (`EvaluationPeriods`) and the time budget
    (`time_limit`, a `TimeLimit`), and streamed data ends training once
    every worker's share is done (`position.exhausted`; a worker whose
    share ended first trains on empty batches meanwhile); the chief's
    estimate of the steps a budget allows sets every worker's learning-rate
    anneal (`anneal`, a `kseq.training.loop.anneal.BudgetAnneal`). One
    all-reduce of four numbers a step; put it after every callback that
    decides at a batch's end.

    Args:
        position: the `TrainingPosition` of streamed data, or None.
        time_limit: the `TimeLimit` callback, or None (default).
        anneal: the `BudgetAnneal`, or None (default).
    """

    def __init__(self, position, time_limit=None, anneal=None):
        super().__init__()
        self.position, self.time_limit, self.anneal = position, time_limit, anneal

    def on_train_begin(self, logs=None):
        strategy = self.model.distribute_strategy
        self.chief, self.replicas = is_chief(strategy), strategy.num_replicas_in_sync

        @tf.function
        def summed(values):  # identity: the all-reduce needs the value on the replica's device
            return strategy.run(lambda v: tf.distribute.get_replica_context().all_reduce("sum", tf.identity(v)),
                                args=(values,))

        self._summed = lambda values: strategy.experimental_local_results(summed(values))[0].numpy()

    def on_train_batch_end(self, batch, logs=None):
        exhausted = self.position is not None and self.position.exhausted(batches_applied(self.model.optimizer))
        period_end = ends_epoch_only(self.model)
        timed_out = self.time_limit is not None and self.time_limit.stopped_at_step is not None
        stop = bool(self.model.stop_training) and not period_end and (timed_out or not exhausted)
        estimate = float(self.anneal.pending) if self.chief and self.anneal is not None else 0.0
        mine = [float(self.chief and stop), float(self.chief and period_end), float(exhausted), estimate]
        stop, period_end, exhausted, estimate = self._summed(tf.constant(mine))
        if self.anneal is not None:
            self.anneal.agree(int(estimate))
        self.model.stop_training = False
        if stop or exhausted >= self.replicas:
            self.model.stop_training = True
        elif period_end:
            end_epoch_early(self.model)


def weights_fingerprint(model):
    """Hashes all the model's weights, to compare replicas or workers.

    Args:
        model: a keras model.

    Returns:
        The sha256 hex digest of its weights' bytes, in order.
    """
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()
