"""Each path of kseq.layers.device_paths alone, on the CPU: the default
paths' outputs and gradients with the same weights, and the ops of a train
step changed as the path says."""

import numpy as np
import pytest

from kseq.layers import device_paths
from support import load_test_module, relative_tolerance
from transformer_device_steps import default_step, traced_step

gpu_paths = load_test_module("models/test_gpu_paths")
CONFIGS, built = gpu_paths.CONFIGS, gpu_paths.built

PATHS = sorted(device_paths.PATHS)
# cast_once changes nothing in float32 (a cast to float32 is no op there).
POLICY = {"cast_once": "mixed_bfloat16"}


# What each path changes in a train step's ops; step_dropout's one key a step:
# tests/models/test_gpu_paths.py (it needs dropout, which these steps leave out).
CHANGES = {
    "layer_norm": lambda d, p: p["Rsqrt"] == 0 < d["Rsqrt"] and p["FusedBatchNormGradV3"] > 0,
    "loss_backward": lambda d, p: p["FusedBatchNormV3"] == 1 and d["FusedBatchNormV3"] == 0,
    "bias_gradients": lambda d, p: p["BiasAddGrad"] == 0 < d["BiasAddGrad"],
    "attention_transposes": lambda d, p: p["Transpose"] < d["Transpose"],
    "additive_masks": lambda d, p: p["SelectV2"] < d["SelectV2"],
    "cast_once": lambda d, p: p["Cast"] < d["Cast"],
    "no_asserts": lambda d, p: p["Assert"] == 0 < d["Assert"],
}


@pytest.mark.parametrize("path", PATHS)
def test_each_path_alone_computes_the_default_and_changes_the_step_as_it_says(path, monkeypatch):
    policy, config_index = POLICY.get(path, "float32"), PATHS.index(path) % 2
    weights, (expected, default, default_compiled) = default_step(config_index, policy)
    model = built(CONFIGS[config_index], [path], monkeypatch, dtype=policy)
    model.set_weights(weights)
    actual, ops, compiled = traced_step(model)
    assert len(actual) == len(expected) == 2 + len(model.trainable_weights)
    compute = "float32" if policy == "float32" else "bfloat16"
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, atol=relative_tolerance(compute) * max(1.0, np.abs(e).max()), rtol=1e-4)
    assert default_compiled == set()
    if path in CHANGES:
        changed = {op: (default[op], ops[op]) for op in set(default) | set(ops) if default[op] != ops[op]}
        assert CHANGES[path](default, ops), changed
    if path == "compiled_blocks":  # forward and backward of each stack's one function
        assert len(compiled) >= 2 and any("_run" in name for name in compiled), compiled
    elif path == "compiled_loss":
        assert compiled and all("lambda" in name for name in compiled), compiled
    else:
        assert not compiled
