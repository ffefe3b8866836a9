"""The Transformer's paths of kseq.layers.device_paths all on together
(FORCE True), on the CPU: the default paths' outputs and gradients with the
same weights, one dropout key a step, the same weights and configs, and
`.keras` files that load across the two. tests/models/test_each_device_path.py
checks each path alone."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.layers import device_paths
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from support import graph_op_types, random_batch, relative_tolerance
from transformer_device_steps import CONFIGS, built, default_step, traced_step


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_outputs_and_gradients_are_the_cpu_paths(config, policy, monkeypatch):
    """The default paths' step (dropout 0: deterministic) is
    test_each_device_path's, traced once a worker for both files."""
    weights, (expected, _, _) = default_step(CONFIGS.index(config), policy)
    gpu = built(config, True, monkeypatch, dtype=policy)
    gpu.set_weights(weights)
    actual, _, _ = traced_step(gpu)
    assert len(actual) == len(expected) == 2 + len(gpu.trainable_weights)
    compute = "float32" if policy == "float32" else "bfloat16"
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, atol=relative_tolerance(compute) * max(1.0, np.abs(e).max()), rtol=1e-4)


def dropout_ops(model, batch):
    @tf.function
    def step(batch):
        return model(batch, training=True)

    graph = step.get_concrete_function(batch).graph.as_graph_def()
    nodes = list(graph.node) + [node for function in graph.library.function for node in function.node_def]
    return sum(node.op == "StatelessRandomGetKeyCounter" for node in nodes)


def test_dropout_draws_one_key_a_step_and_repeats_with_the_seed(monkeypatch):
    batch = {name: tf.constant(ids) for name, ids in random_batch().items()}
    config = CONFIGS[0]
    keras.utils.set_random_seed(5)
    gpu = built(config, True, monkeypatch, dropout=0.3)
    keras.utils.set_random_seed(5)
    again = built(config, True, monkeypatch, dropout=0.3)
    cpu = built(config, False, monkeypatch, dropout=0.3)
    # Embeddings + 2 encoder blocks x 2 sublayers + 2 decoder blocks x 3: 12 calls.
    assert dropout_ops(gpu, batch) == 1 and dropout_ops(cpu, batch) == 12

    @tf.function
    def two_steps(model):
        return model(batch, training=True), model(batch, training=True)

    first, second = two_steps(gpu)
    assert np.abs(np.asarray(first) - np.asarray(second)).max() > 1e-3  # a new key each step
    for a, b in zip((first, second), two_steps(again)):
        np.testing.assert_array_equal(a, b)
    inference = np.asarray(gpu(batch, training=False))
    cpu.set_weights(gpu.get_weights())
    np.testing.assert_allclose(inference, np.asarray(cpu(batch, training=False)), atol=1e-5, rtol=1e-5)


def test_weights_configs_and_keras_files_are_shared(monkeypatch, tmp_path):
    batch = random_batch()
    cpu = built(CONFIGS[0], False, monkeypatch, dropout=0.1)
    gpu = built(CONFIGS[0], True, monkeypatch, dropout=0.1)
    def inside(model):  # paths below the model's own (automatic, so different) name
        return [w.path.split("/", 1)[1] for w in model.weights]

    assert inside(cpu) == inside(gpu)
    assert dict(cpu.get_config(), name=None) == dict(gpu.get_config(), name=None)
    path = str(tmp_path / "model.keras")
    cpu.save(path)
    monkeypatch.setattr(device_paths, "FORCE", True)
    loaded = keras.saving.load_model(path)
    assert loaded._uses_step_dropout and loaded.encoder_blocks[0].self_attention_norm._fused
    np.testing.assert_allclose(np.asarray(loaded(batch)), np.asarray(cpu(batch)), atol=1e-5, rtol=1e-5)
    out = np.asarray(loaded.generate(batch["source_ids"], max_length=6))
    np.testing.assert_array_equal(out, np.asarray(cpu.generate(batch["source_ids"], max_length=6)))


def test_a_train_step_on_the_gpu_path_runs_fused_ops(monkeypatch):
    model = built(CONFIGS[0], True, monkeypatch, dropout=0.1)
    batch = {name: tf.constant(ids) for name, ids in random_batch().items()}

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            value = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)(
                batch["target_ids"], model(batch, training=True))
        return tape.gradient(value, model.trainable_weights)

    ops = graph_op_types(step.get_concrete_function(batch))
    assert {"FusedBatchNormV3", "FusedBatchNormGradV3", "StatelessRandomUniformV2"} <= ops
    assert "Rsqrt" not in ops  # the closed-form LayerNorm's
