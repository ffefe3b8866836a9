"""Shared configurations and helpers for the tests."""

import fcntl
import importlib.util
import json
import os
import random
import shutil
import unicodedata

import numpy as np
import keras
import tensorflow as tf

from kseq.decoding import GreedySearch
from kseq.data.text import normalize_text
from kseq.special_ids import BOS_ID, EOS_ID
from kseq.layers.masking import padding_mask
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from kseq.models import RNNLanguageModel, RNNSeq2Seq, SequenceClassifier, TransformerSeq2Seq
from kseq.training.objectives import FusedAdam

VOCAB = 30

# Every cell type, each attention, peeky, reverse_source, bidirectional,
# stacking, input feeding, both norm placements, learned positions and shared
# embeddings.
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
    dict(cell="lstm", attention="general", input_feeding=True),
    dict(cell="gru", attention="dot", input_feeding=True, peeky=True),
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


def small_model(kind, config, dropout=0.1, dtype=None):
    """A tiny model of the given configuration, with dropout layers present."""
    if kind == "rnn":
        return RNNSeq2Seq(VOCAB, VOCAB, embed_dim=8, units=12, dropout=dropout, dtype=dtype, **config)
    return TransformerSeq2Seq(
        VOCAB, VOCAB, num_layers=2, d_model=16, num_heads=2, ff_dim=24,
        dropout=dropout, max_length=32, dtype=dtype, **config,
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


# How far results computed with these matmuls may sit from float32 ones, as a
# fraction of the outputs' scale, through a few layers: bfloat16 keeps 8
# mantissa bits (2-3 significant digits), TF32 and float16 keep 11.
RELATIVE_TOLERANCE = {"float32": 1e-5, "tf32": 1e-2, "float16": 1e-2, "bfloat16": 3e-2}


def relative_tolerance(compute):
    """The tolerance for results whose matmuls ran in `compute` ("float32",
    "tf32", "float16" or "bfloat16"), relative to the outputs' scale."""
    return RELATIVE_TOLERANCE[compute]


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
TF_ONLY_PREAMBLE = """
import glob, importlib.util, json, os, sys
for name in ("keras", "keras_hub", "kseq", "tf_keras"):
    sys.modules[name] = None
import tensorflow as tf
text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
for library in glob.glob(os.path.join(text_dir, "python", "ops", "_*.so")):
    tf.load_op_library(library)
"""
def uncached_greedy(model, fixed_inputs, max_length):
    """Greedy decoding by the naive loop: the whole teacher-forced model on
    the growing prefix, `fixed_inputs` (e.g. {"source_ids": ...}) beside
    `target_ids`. Returns ids without BOS, PAD after EOS."""
    rows = len(next(iter(fixed_inputs.values())))
    prefix = np.full((rows, 1), BOS_ID, "int32")
    finished = np.zeros(rows, bool)
    for _ in range(max_length):
        logits = np.array(model({**fixed_inputs, "target_ids": prefix}))[:, -1]
        logits[:, :2] = -np.inf  # PAD and BOS are never generated
        chosen = np.where(finished, 0, logits.argmax(-1)).astype("int32")
        finished |= chosen == EOS_ID
        prefix = np.concatenate([prefix, chosen[:, None]], 1)
        if finished.all():
            break
    return prefix[:, 1:]


def subprocess_env(**extra):
    """The environment for a child Python process of a test: quiet
    TensorFlow logs, and float32 matmuls in float32 on a GPU too
    (NVIDIA_TF32_OVERRIDE=0, as conftest's `float32_is_float32` does in the
    test process), so a child's results compare with the test's at float32
    tolerances."""
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NVIDIA_TF32_OVERRIDE="0", **extra)


# Whitespace a client may send (normalize_text collapses every str.isspace character).
MESSY_SPACES = ["\t", "\n", "  ", " \t ", "\u00a0", "\u3000", "\r\n", "\u2003"]


def messy_variants(texts, seed=0):
    """What clients send for `texts`, request by request: [the texts
    decomposed (NFD, as macOS and web forms send accents), the texts with
    random whitespace runs and padding, the texts normalized as training
    reads them]; each list has `texts`' order, so row i of every request
    is the same text."""
    rng = random.Random(seed)

    def messy(text):
        words = text.split()
        spaces = [rng.choice(MESSY_SPACES) for _ in range(len(words) + 1)]
        return spaces[0] + "".join(word + space for word, space in zip(words, spaces[1:]))

    return [[unicodedata.normalize("NFD", text) for text in texts], [messy(text) for text in texts],
            [normalize_text(text) for text in texts]]


def random_texts(words, count, seed=0, blank_every=5):
    """`count` random texts of `words` (accented ones included by the
    caller), every `blank_every`-th one blank (empty or whitespace only)."""
    rng = random.Random(seed)
    texts = []
    for index in range(count):
        if index % blank_every == 0:
            texts.append(rng.choice(["", " ", "\t\n", "\u00a0\u3000"]))
        else:
            texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))))
    return texts


def check_served_text_is_normalized(server, path, words, output, blank_output="", count=40):
    """Serves random texts of `words` as clients send them (NFC and NFD,
    tabs, newlines, runs of spaces) and normalized, with `server` (the
    `tf_only` fixture's TensorFlow-only process): the same text gets the
    same `output` however it was sent; a blank text gets `blank_output`."""
    texts = random_texts(words, count)
    variants = messy_variants(texts)
    answers = server.serve_text_batches(path, [texts] + variants)
    expected = answers[-1][output]
    for answer in answers[:-1]:
        assert answer[output] == expected
    blanks = [row for row, text in enumerate(texts) if not text.strip()]
    assert blanks and all(expected[row] == blank_output for row in blanks)
    assert any(expected[row] != blank_output for row in range(count) if row not in blanks)
    return answers


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


def pad_right(ids, extra):
    return np.concatenate([ids, np.zeros((ids.shape[0], extra), ids.dtype)], axis=1)


def check_padding_invariance(model):
    """Extra padding changes no logit at a real position, and a row's logits
    do not depend on the other rows of its batch."""
    batch = random_batch()
    logits = np.asarray(model(batch))
    padded = {"source_ids": pad_right(batch["source_ids"], 4), "target_ids": pad_right(batch["target_ids"], 3)}
    padded_logits = np.asarray(model(padded))[:, : logits.shape[1]]
    real = batch["target_ids"] != 0
    assert_close(padded_logits[real], logits[real])
    alone = np.asarray(model({k: v[2:3, : 7 - 2] if k == "source_ids" else v[2:3, :4] for k, v in batch.items()}))
    assert_close(alone[0], logits[2, :4])


def check_step_equals_call(model, atol=2e-5):
    """Decoding step by step on the teacher-forced tokens gives the logits
    of the teacher-forced call at every real position."""
    batch = random_batch()
    logits = np.asarray(model(batch))
    state = model.initial_state(
        model.encode(batch["source_ids"]), padding_mask(batch["source_ids"]), max_length=8
    )
    steps = []
    for index in range(batch["target_ids"].shape[1]):
        step_logits, state = model.step(tf.constant(batch["target_ids"][:, index]), state, index)
        steps.append(step_logits)
    real = batch["target_ids"] != 0
    assert_close(np.stack(steps, 1)[real], logits[real], atol=atol)


def check_encoder_final_states(encoder, width):
    """With right-padded masks, each row's final states are its states at
    its last real token: row 0 padded gives what row 0 alone gives."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    outputs, states = encoder(x, padding_mask=mask)
    assert outputs.shape == (2, 6, width)
    alone_outputs, alone_states = encoder(x[:1, :3])
    for layer, alone_layer in zip(states, alone_states):
        for state, alone in zip(layer, alone_layer):
            assert state.shape == (2, width)
            assert_close(state[:1], alone)
    assert_close(outputs[:1, :3], alone_outputs)
    return states


# Mixed precision, per model family (tests/models/test_mixed_precision.py, tests/test_gpu.py).

def build_family(family, policy):
    """(model, inputs, labels, loss) of one model family under `policy`."""
    batch = random_batch()
    if family in ("transformer", "rnn"):
        # Dropout makes keras' attention take its explicit-softmax path.
        kind, config = family, dict(norm_first=False) if family == "transformer" else dict(cell="lstm", attention="general")
        model = small_model(kind, config, dropout=0.1, dtype=policy)
        return model, batch, np.roll(batch["target_ids"], -1, axis=1), MaskedSparseCategoricalCrossentropy(0.1)
    ids = batch["target_ids"]
    if family == "language_model":
        model = RNNLanguageModel(30, embed_dim=8, units=8, cell="lstm", carry_state=False, dtype=policy)
        return model, ids, np.roll(ids, -1, axis=1), MaskedSparseCategoricalCrossentropy()
    model = SequenceClassifier(30, 2, encoder="rnn", pooling="attention", embed_dim=8, units=8,
                               dtype=policy)
    return model, ids, np.array([0, 1, 0]), keras.losses.SparseCategoricalCrossentropy(from_logits=True)


FAMILIES = ["transformer", "rnn", "language_model", "classifier"]


def check_mixed_training(model, inputs, labels, loss, steps=8):
    """Variables stay float32, the loss is float32 and falls over a few steps
    of fit; mixed_float16 trains through keras' loss scaling."""
    policy = model.dtype_policy.name
    outputs = model(inputs)
    assert outputs.dtype == policy.split("_")[-1], (outputs.dtype, policy)
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    assert loss(labels, outputs).dtype == "float32"
    model.compile(FusedAdam(1e-2), loss)
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    losses = model.fit(inputs, labels, epochs=steps, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert all(v.dtype == "float32" for v in model.trainable_variables)


def check_float32_softmax(model, inputs, labels, loss):
    """Every softmax of a train step (attention weights; the loss, whose
    normalisation is an Exp) and of a greedy search (attention over the
    cache or the source) runs in float32."""
    model(inputs)

    @tf.function
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, model(inputs, training=True))
        return tape.gradient(value, model.trainable_variables)

    functions = [train_step.get_concrete_function(inputs, labels)]
    if hasattr(model, "search"):
        ids = inputs["source_ids"] if isinstance(inputs, dict) else inputs
        search = tf.function(lambda ids: model.search(ids, GreedySearch(4)))
        functions.append(search.get_concrete_function(tf.constant(ids)))
    softmax = []
    for function in functions:
        graph = function.graph.as_graph_def()
        nodes = list(graph.node) + [node for f in graph.library.function for node in f.node_def]
        softmax += [node for node in nodes
                    if ("Softmax" in node.op and "Grad" not in node.op) or node.op == "Exp"]
    assert softmax, "no softmax found: the check would pass vacuously"
    half = [f"{node.op} {node.name}" for node in softmax
            if node.attr["T"].type != tf.float32.as_datatype_enum]
    assert not half, half


class KillAt(keras.callbacks.Callback):
    """Raises as a kill would: after batch `batch` (1-based) of this run, or
    at the end of its `period`-th evaluation period (after the callbacks
    before it have logged and recorded that evaluation, before the save)."""

    def __init__(self, batch=None, period=None):
        super().__init__()
        self.batch, self.period, self.batches, self.periods = batch, period, 0, 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches == self.batch:
            raise KeyboardInterrupt

    def on_epoch_end(self, epoch, logs=None):
        self.periods += 1
        if self.periods == self.period:
            raise KeyboardInterrupt


def cadenced_run(workdir, epochs, cadence_steps, save_every, learning_rate, stopping=lambda schedule: [],
                 accumulate=1, kill=None, anneal=0.0):
    """A small reversal translator fitted by `Fit` in `workdir`, evaluated
    every `cadence_steps`, resuming what a killed run left there;
    `stopping(schedule)` gives the stopping callbacks, `kill` a `KillAt`;
    `anneal` > 0 anneals the rate over that last share of the steps.
    -> (model, fit's metrics, the stopping callbacks, the batches of all epochs)."""
    from kseq.data.bucketing import bucketed_pair_dataset
    from kseq.data.character_tokenizer import CharacterTokenizer
    from kseq.data.synthetic import reversed_words
    from kseq.training.task import compile_model
    from kseq.training.loop.fit import Fit
    from kseq.training.objectives.optimizers import FusedAdam
    from kseq.training.progress import Cadence
    from kseq.training.objectives.schedules import Annealed, Scaled

    letters = "abcdefghij"
    tokenizer = CharacterTokenizer(letters)
    sources, targets = reversed_words(120, letters, min_length=2, max_length=11, seed=0)
    fit = Fit(str(workdir), Cadence(steps=cadence_steps), save_every=save_every)
    train, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, token_budget=60, max_length=14,
                                          seed=3, position=fit.position, epochs=epochs)
    valid, _ = bucketed_pair_dataset(sources[:20], targets[:20], tokenizer, tokenizer, token_budget=60,
                                     max_length=14, shuffle=False)
    keras.utils.set_random_seed(7)
    model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=8, units=16, attention="dot")
    model.build()
    schedule = Scaled(learning_rate)
    compile_model(model, FusedAdam(Annealed(schedule, anneal) if anneal else schedule, clipnorm=1.0),
                  MaskedSparseCategoricalCrossentropy(), accumulate=accumulate)
    callbacks = stopping(schedule)
    metrics = fit.fit(model, train, valid, epochs, stopping=callbacks + ([kill] if kill else []))
    return model, metrics, callbacks, epochs * report.batches_per_epoch


def load_benchmark(name):
    """Imports a benchmarks/ script by path (benchmarks/ is not a package)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "benchmarks", name + ".py")
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_test_module(relative):
    """Imports a test file by its path under tests/ ("training/devices/test_x"):
    a folder name such as `training` may be taken by another module on sys.path."""
    root = os.path.dirname(os.path.abspath(__file__))
    name = "tests_" + relative.replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, relative + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def made_once(tmp_path_factory, name, make):
    """(folder, result): `make(folder)` run once a test session in a fresh
    folder, its result as JSON reads it back (the same for every worker):
    for task runs and exports that tests only read.

    Under xdist the workers share the session's temporary folder: the first
    to ask makes it under an exclusive lock, the others wait on that lock
    and read what it left (a module-scoped fixture is made once a worker,
    twice when work stealing splits its module); one that failed leaves no
    result, and the next to ask makes it again. Without xdist workers the
    folder is this session's own."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        return folder, json.loads(json.dumps(make(folder)))
    shared = tmp_path_factory.getbasetemp().parent  # the session's; each worker's basetemp is below it
    folder, result = shared / f"made-once-{name}", shared / f"made-once-{name}.json"
    with open(shared / f"made-once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not result.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a failed attempt's
            folder.mkdir()
            result.write_text(json.dumps(make(folder)))
        return folder, json.loads(result.read_text())
