"""The Transformer built with chosen kseq.layers.device_paths, and its
dropout-free train step on `random_batch()` traced once a worker for the
default paths: tests/models/test_gpu_paths.py and
tests/models/test_each_device_path.py both compare against that step."""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

from kseq.layers import device_paths
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from support import random_batch, small_model

CONFIGS = [dict(norm_first=False), dict(norm_first=True, share_embeddings=True)]


def built(config, gpu_path, monkeypatch, dropout=0.0, dtype=None):
    monkeypatch.setattr(device_paths, "FORCE", gpu_path)
    model = small_model("transformer", config, dropout=dropout, dtype=dtype)
    model(random_batch())
    return model


def traced_step(model):
    """A dropout-free train step's logits, loss and gradients on
    `random_batch()`, with its graph's op type -> count (the functions it
    calls included) and the names of the functions XLA must compile."""
    batch = random_batch()
    labels = np.roll(batch["target_ids"], -1, axis=1)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)  # chooses its paths now

    @tf.function
    def run(batch):
        with tf.GradientTape() as tape:
            logits = model(batch, training=True)
            value = loss(labels, logits)
        gradients = tape.gradient(value, model.trainable_weights)
        return [logits, value] + [tf.convert_to_tensor(g) for g in gradients]  # embeddings': IndexedSlices

    batch = {name: tf.constant(ids) for name, ids in batch.items()}
    graph = run.get_concrete_function(batch).graph.as_graph_def()
    nodes = list(graph.node) + [node for function in graph.library.function for node in function.node_def]
    compiled = {f.signature.name for f in graph.library.function if f.attr["_XlaMustCompile"].b}
    compiled |= {node.attr["f"].func.name for node in nodes if node.attr["_XlaMustCompile"].b}
    results = [np.asarray(tf.cast(t, tf.float32)) for t in run(batch)]
    return results, collections.Counter(node.op for node in nodes), compiled


@functools.lru_cache(maxsize=None)
def default_step(config_index, policy):
    """The default paths' weights and `traced_step`, once a worker. The
    model is built first thing in a test that calls this first, right
    after conftest's seed: the weights are the same whichever test that is."""
    patch = pytest.MonkeyPatch()
    try:
        model = built(CONFIGS[config_index], False, patch, dtype=policy)
        return model.get_weights(), traced_step(model)
    finally:
        patch.undo()
