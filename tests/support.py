"""Shared configurations and helpers for the tests."""

import json
import os
import subprocess
import sys

import numpy as np
import keras

from kseq.models import RNNSeq2Seq, TransformerSeq2Seq

VOCAB = 30

# Every cell type, each attention, peeky, reverse_source, bidirectional,
# stacking, both norm placements, learned positions and shared embeddings.
RNN_CONFIGS = [
    dict(cell="rnn"),
    dict(cell="lstm"),
    dict(cell="gru"),
    dict(cell="lstm", attention="dot"),
    dict(cell="gru", attention="general"),
    dict(cell="rnn", attention="concat"),
    dict(cell="lstm", attention="bahdanau"),
    dict(cell="gru", peeky=True),
    dict(cell="gru", attention="bahdanau", peeky=True),
    dict(cell="lstm", reverse_source=True),
    dict(cell="lstm", attention="general", reverse_source=True, peeky=True),
    dict(cell="gru", bidirectional=True),
    dict(cell="lstm", bidirectional=True, num_layers=2, attention="dot"),
    dict(cell="rnn", bidirectional=True, attention="bahdanau", reverse_source=True),
]
TRANSFORMER_CONFIGS = [
    dict(norm_first=False),
    dict(norm_first=True),
    dict(position="learned", share_embeddings=True),
    dict(norm_first=True, position="learned"),
]
ALL_CONFIGS = [("rnn", c) for c in RNN_CONFIGS] + [("transformer", c) for c in TRANSFORMER_CONFIGS]


def config_id(entry):
    kind, config = entry
    return kind + ("-" + "-".join(f"{k}={v}" for k, v in config.items()) if config else "")


def small_model(kind, config, dropout=0.1):
    """A tiny model of the given configuration, with dropout layers present."""
    if kind == "rnn":
        return RNNSeq2Seq(VOCAB, VOCAB, embed_dim=8, units=12, dropout=dropout, **config)
    return TransformerSeq2Seq(
        VOCAB, VOCAB, num_layers=2, d_model=16, num_heads=2, ff_dim=24,
        dropout=dropout, max_length=32, **config,
    )


def random_batch(batch=3, source_length=7, target_length=6, seed=0, low=4, high=VOCAB):
    """Right-padded source/target ids with rows of different lengths."""
    rng = np.random.default_rng(seed)
    source = rng.integers(low, high, (batch, source_length)).astype("int32")
    target = rng.integers(low, high, (batch, target_length)).astype("int32")
    target[:, 0] = 1
    for row in range(batch):
        source[row, source_length - row :] = 0
        target[row, target_length - row :] = 0
    return {"source_ids": source, "target_ids": target}


def assert_close(a, b, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=1e-5)


def assert_all_close(expected, actual):
    expected, actual = keras.tree.flatten(expected), keras.tree.flatten(actual)
    assert len(expected) == len(actual)
    for a, b in zip(expected, actual):
        assert_close(a, b)


def roundtrip(model, tmp_path, inputs):
    """Checks config and .keras round trips give identical outputs."""
    expected = model(inputs)
    clone = model.__class__.from_config(model.get_config())
    clone(inputs)
    clone.set_weights(model.get_weights())
    assert_all_close(expected, clone(inputs))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    actual = loaded(inputs)  # first call right after loading, as a user would
    try:
        assert_all_close(expected, actual)
    except AssertionError as error:
        different = [
            a.path for a, b in zip(model.weights, loaded.weights)
            if a.shape != b.shape or not np.array_equal(a, b)
        ]
        repeat = keras.tree.flatten(loaded(inputs))
        stable = all(np.array_equal(a, b) for a, b in zip(keras.tree.flatten(actual), repeat))
        raise AssertionError(
            f"outputs differ after .keras load; weights that differ: {different}; "
            f"a second call of the loaded model gives the same outputs: {stable}"
        ) from error
    return loaded


# Serves an export in a fresh interpreter with TensorFlow and tensorflow_text's
# op libraries only, as TF Serving has: keras, keras_hub and kseq cannot be
# imported (tensorflow_text's Python package imports keras, so its compiled
# ops are loaded directly).
SERVE_WITH_TEXT_OPS = """
import glob, importlib.util, json, os, sys
for name in ("keras", "keras_hub", "kseq", "tf_keras"):
    sys.modules[name] = None
import tensorflow as tf
text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
for library in glob.glob(os.path.join(text_dir, "python", "ops", "_*.so")):
    tf.load_op_library(library)
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
name = list(serve.structured_input_signature[1])[0]
out = serve(**{name: tf.constant(json.loads(sys.argv[2]))})
print(json.dumps({"input": name, **{key: value.numpy().tolist() for key, value in out.items()}},
                 default=lambda b: b.decode()))
"""


def serve_with_text_ops(path, texts):
    """{"input": the signature's input name, output name: values} from
    serving `texts` with the export at `path` in a TensorFlow-only process."""
    result = subprocess.run(
        [sys.executable, "-c", SERVE_WITH_TEXT_OPS, path, json.dumps(texts)],
        capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def graph_op_types(concrete_function):
    """Every op type in a traced function, its nested functions (loop
    bodies, cond branches) included."""
    graph = concrete_function.graph.as_graph_def()
    types = {node.op for node in graph.node}
    for function in graph.library.function:
        types |= {node.op for node in function.node_def}
    return types


def cudnn_ops(concrete_function):
    return sorted(op for op in graph_op_types(concrete_function) if op.startswith("CudnnRNN"))
