"""tf.distribute strategies for the recipes: one device, local replicas, or
several machines (MultiWorkerMirroredStrategy configured by TF_CONFIG)."""

import hashlib

import numpy as np
import tensorflow as tf

from kseq._compat import clip_after_all_reduce, fix_keras_multi_worker_logs
from kseq._validation import check_choice

__all__ = [
    "STRATEGIES", "clip_after_all_reduce", "distribute_batches", "fix_keras_multi_worker_logs",
    "is_chief", "make_strategy", "task", "weights_fingerprint",
]

STRATEGIES = ("default", "mirrored", "multiworker")


def make_strategy(name):
    """"default" (one device), "mirrored" (every local GPU, or the CPU) or
    "multiworker" (every worker in TF_CONFIG; create it before any other
    TensorFlow work, as collective ops are set up at program start)."""
    check_choice("strategy", name, STRATEGIES)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        fix_keras_multi_worker_logs()
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def task(strategy):
    """(task type, task id) of this process, ("chief", 0) outside a cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return "chief", 0
    return resolver.task_type, resolver.task_id or 0


def is_chief(strategy):
    """Whether this process writes logs, checkpoints and exports: the
    "chief" task, or worker 0 when the cluster has no chief."""
    task_type, task_id = task(strategy)
    if task_type == "chief":
        return True
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def distribute_batches(strategy, dataset):
    """A distributed dataset in which every replica of every worker gets its
    share of each global batch.

    Each worker builds `dataset` itself (same seed, so the same batches),
    then keeps its replicas' slices of every batch: all workers step
    through the same number of batches whatever their shapes (bucketed
    batches of varying size), which collectives need. A slice may be empty
    when a batch has fewer rows than there are replicas; the kseq losses
    divide by the global count of real tokens, so that is harmless.
    """
    def worker_dataset(context):
        replicas = context.num_replicas_in_sync
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local

        def slices(features, labels):
            rows = tf.shape(labels, out_type=tf.int64)[0]

            def piece(replica):
                start, end = (rows * replica) // replicas, (rows * (replica + 1)) // replicas
                return tf.nest.map_structure(lambda x: x[start:end], (features, labels))

            return tf.data.Dataset.range(first, first + local).map(piece)

        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        sliced = dataset.flat_map(slices)
        batches = int(dataset.cardinality())
        # keras reads the per-worker count as steps per epoch: exact only
        # with one replica per worker (unknown otherwise, then keras counts
        # the first epoch, and a resumed epoch restarts from its start).
        if batches >= 0 and local == 1:
            sliced = sliced.apply(tf.data.experimental.assert_cardinality(batches))
        return sliced.with_options(options)

    return strategy.distribute_datasets_from_function(worker_dataset)


def weights_fingerprint(model):
    """sha256 of all the model's weights, to compare replicas or workers."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()
