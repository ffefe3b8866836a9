"""export_translator and export_conditioned_generator, served by TensorFlow alone.

Tests that read only `serving_default` export with `n_best=0`: the `n_best`
signature would trace a second, wider search (test_export_signatures.py
tests it).
"""

import os
import string
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from kseq.data import CharacterTokenizer
from kseq.decoding import BeamSearch, GreedySearch, Sampler
from kseq.export import export_conditioned_generator, export_translator, latest_version, next_version
from kseq.export.compute_dtype import in_compute_dtype
from kseq.models import ConditionedGenerator, RNNSeq2Seq
from support import small_model, subprocess_env


def serve_translation(tf_only, path, sources):
    """The export at `path` translating `sources` in this worker's
    TensorFlow-only process (conftest's `tf_only`: keras, keras_hub and kseq
    cannot be imported there, as TF Serving has them not): its outputs, with
    "inputs", the signature's input names, and "modules", the kseq and keras
    modules that process holds."""
    reply = tf_only.serve(path, {"source": sources})
    return {**reply["answers"][0]["outputs"], "inputs": reply["inputs"], "modules": reply["modules"]}


@pytest.mark.parametrize("kind,config", [
    ("transformer", {}), ("rnn", {"attention": "bahdanau"}),
    ("rnn", {"attention": "general", "input_feeding": True}),
])
def test_export_serves_without_kseq_and_agrees_with_python(kind, config, tmp_path, tf_only):
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    model = small_model(kind, config)
    path = export_translator(model, tokenizer, tokenizer, str(tmp_path / "reverse"), max_length=10)
    assert path.endswith(os.path.join("reverse", "1"))
    sources = ["keras", "sequence", "", "abc!"]  # empty and unknown characters too
    served = serve_translation(tf_only, path, sources)
    assert served["modules"] == []
    assert served["inputs"] == ["source"]
    ids = tokenizer.tokenize(sources).to_tensor()
    ids = tf.pad(ids, [[0, 0], [0, max(0, 1 - ids.shape[1])]])
    expected = np.asarray(model.generate(ids, max_length=10))
    assert served["token_ids"] == expected.tolist()
    expected_text = [t.decode() for t in tokenizer.detokenize(expected).numpy()]
    assert served["translation"] == expected_text


def test_export_with_beam_search_serves_the_best_hypothesis(tmp_path, tf_only, monkeypatch):
    """Also: each search is traced once (keras' ExportArchive traced each
    signature twice), the translation and the alignment sharing theirs, each
    weight is saved once, and no gradient function of a custom-gradient op
    is saved (TensorFlow's default saves them)."""
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    model = small_model("transformer", {})
    search = BeamSearch(10, beam_size=3, length_penalty=0.6)
    traces = []
    search_once = BeamSearch.__call__
    monkeypatch.setattr(BeamSearch, "__call__", lambda *args, **kwargs: traces.append(1) or search_once(*args, **kwargs))
    path = export_translator(model, tokenizer, tokenizer, str(tmp_path / "beam"), search=search)
    monkeypatch.undo()
    assert len(traces) == 2, "serving_default's search (alignment's too) and n_best's; score does not search"
    saved = [name for name, _ in tf.train.list_variables(os.path.join(path, "variables", "variables"))
             if name != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert len(saved) == len(model.variables)
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    library = saved_model.meta_graphs[0].graph_def.library
    assert len(library.function) > 0 and len(library.registered_gradients) == 0
    sources = ["keras", "attention", "abc"]
    served = serve_translation(tf_only, path, sources)
    ids = tokenizer.tokenize(sources).to_tensor()
    expected = model.generate(ids, max_length=10, method="beam", beam_size=3, length_penalty=0.6)
    assert served["token_ids"] == np.asarray(expected).tolist()


def test_export_serves_the_no_repeat_ngram_constraint(tmp_path, tf_only):
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    model = small_model("transformer", {}, dropout=0.0)
    ids = tokenizer.tokenize(["keras", "loop"]).to_tensor()
    model({"source_ids": ids, "target_ids": ids})  # builds it
    bias = np.zeros(model.target_vocab_size, "float32")
    bias[[7, 8]], bias[2] = 30.0, -30.0  # a model that loops "de" forever
    model.output_projection.bias.assign(bias)
    search = GreedySearch(10, no_repeat_ngram_size=2)
    path = export_translator(model, tokenizer, tokenizer, str(tmp_path / "m"), search=search, n_best=0)
    served = serve_translation(tf_only, path, ["keras", "loop"])
    expected = np.asarray(model.generate(ids, max_length=10, no_repeat_ngram_size=2))
    assert served["token_ids"] == expected.tolist()
    assert not np.array_equal(expected, model.generate(ids, max_length=10))


def test_an_xla_compiled_export_serves_what_the_plain_one_does(tmp_path, tf_only):
    """`jit_compile=True`: the beam search inside the SavedModel is compiled
    by XLA when served (the GPU serving setting), on requests padded to few
    shapes; a recurrent model's search holds no cuDNN op, so it compiles."""
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    model = small_model("rnn", dict(cell="gru", attention="bahdanau", bidirectional=True), dropout=0.0)
    search = BeamSearch(10, beam_size=2)
    plain = export_translator(model, tokenizer, tokenizer, str(tmp_path / "m"), search=search, n_best=0)
    compiled = export_translator(model, tokenizer, tokenizer, str(tmp_path / "m"), search=search,
                                 jit_compile=True, n_best=0)
    sources = ["keras", "", "abcdefghijklmnopqrstuvwxyz"]  # 3 rows -> 4, 26 columns -> 32
    served = serve_translation(tf_only, compiled, sources)
    assert served["modules"] == []
    assert served["token_ids"] == serve_translation(tf_only, plain, sources)["token_ids"]


def test_export_versions_and_refuses_to_overwrite(tmp_path):
    tokenizer = CharacterTokenizer("abc")
    model = small_model("rnn", {})
    root = str(tmp_path / "m")
    assert next_version(root) == 1
    first = export_translator(model, tokenizer, tokenizer, root, max_length=4, n_best=0)
    second = export_translator(model, tokenizer, tokenizer, root, max_length=4, n_best=0)
    assert [os.path.basename(first), os.path.basename(second)] == ["1", "2"]
    assert sorted(os.listdir(root)) == ["1", "2"], "no temporary folders left behind"
    with pytest.raises(ValueError, match="already exists and is not empty"):
        export_translator(model, tokenizer, tokenizer, root, version=2)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        export_translator(model, tokenizer, tokenizer, str(blocker))


def test_character_tokenizer_round_trip(tmp_path):
    tokenizer = CharacterTokenizer.fit(["hello", "world"])
    assert tokenizer.vocab_size == 4 + 7
    ids = tokenizer.tokenize(["hello", "wxrld"]).to_list()
    assert 3 in ids[1], "x is unknown"
    text = tokenizer.detokenize(tf.ragged.constant(ids).to_tensor()).numpy().tolist()
    assert text == ["hello".encode(), "w\u2047rld".encode()]
    path = str(tmp_path / "vocab.json")
    tokenizer.save(path)
    assert CharacterTokenizer.load(path).characters == tokenizer.characters
    with pytest.raises(ValueError, match="distinct"):
        CharacterTokenizer("aa")


def test_conditioned_generator_export_serves_what_generate_gives(tmp_path, tf_only):
    """A generator of feature vectors: `condition` float32 (B, N) in, text
    out, served by TensorFlow alone; a seeded sampler gives generate's ids."""
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    model = ConditionedGenerator(tokenizer.vocab_size, condition_dim=3, embed_dim=8, units=12,
                                 cell="gru", peeky=True)
    search = Sampler(10, temperature=0.9, top_k=8, seed=5, no_repeat_ngram_size=2)
    path = export_conditioned_generator(model, tokenizer, str(tmp_path / "gen"), search=search)
    conditions = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
    reply = tf_only.serve(path, {"condition": conditions.tolist()})
    served = reply["answers"][0]["outputs"]
    assert reply["inputs"] == ["condition"] and reply["modules"] == []
    expected = np.asarray(model.generate(conditions, max_length=10, method="sample", temperature=0.9,
                                         top_k=8, seed=5, no_repeat_ngram_size=2))
    assert served["token_ids"] == expected.tolist()
    assert served["text"] == [t.decode() for t in tokenizer.detokenize(expected).numpy()]
    assert len(set(map(tuple, expected.tolist()))) > 1, "different conditions, different texts"
    assert latest_version(str(tmp_path / "gen")) == path


def test_a_label_generators_two_signatures_serve_one_traced_search(tmp_path, monkeypatch):
    """`serving_default` (labels) and `by_class_id` call one traced
    generation: the search is traced once, and a label's text is its id's."""
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    model = ConditionedGenerator(tokenizer.vocab_size, num_classes=2, embed_dim=8, units=8)
    traces, search_once = [], GreedySearch.__call__
    monkeypatch.setattr(GreedySearch, "__call__",
                        lambda *args, **kwargs: traces.append(1) or search_once(*args, **kwargs))
    path = export_conditioned_generator(model, tokenizer, str(tmp_path / "gen"), search=GreedySearch(8),
                                        labels=["rotten", "fresh"])
    monkeypatch.undo()
    assert len(traces) == 1
    signatures = tf.saved_model.load(path).signatures
    by_label = signatures["serving_default"](label=tf.constant(["fresh", "rotten"]))
    by_id = signatures["by_class_id"](class_id=tf.constant([1, 0]))
    assert by_label["token_ids"].numpy().tolist() == by_id["token_ids"].numpy().tolist()
    assert by_label["text"].numpy().tolist() == by_id["text"].numpy().tolist()


def test_conditioned_generator_export_checks_its_labels(tmp_path):
    tokenizer = CharacterTokenizer("abc")
    classes = ConditionedGenerator(tokenizer.vocab_size, num_classes=2, embed_dim=4, units=4)
    vectors = ConditionedGenerator(tokenizer.vocab_size, condition_dim=2, embed_dim=4, units=4)
    root = str(tmp_path / "m")
    cases = [
        (classes, None, "must name the model's 2 classes"),
        (classes, ["fresh"], "must name the model's 2 classes"),
        (classes, ["fresh", "fresh"], "distinct strings"),
        (vectors, ["a", "b"], "this model takes feature vectors"),
    ]
    for model, labels, message in cases:
        with pytest.raises(ValueError, match=message):
            export_conditioned_generator(model, tokenizer, root, labels=labels)
    assert latest_version(root) is None and not os.path.exists(root), "nothing written"


KILLED_EXPORT = """
import sys
from kseq.data import CharacterTokenizer
from kseq.export import export_translator
from kseq.models import RNNSeq2Seq
tokenizer = CharacterTokenizer("abc")
model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=4, units=8, attention="dot")
model.build()
export_translator(model, tokenizer, tokenizer, sys.argv[1], max_length=6)
"""


@pytest.mark.e2e
def test_an_export_killed_mid_write_is_never_a_version_a_server_picks_up(tmp_path):
    """SIGKILL while the SavedModel is being written: no version folder (TF
    Serving loads only numeric ones), and the next export is version 1."""
    import signal
    import time

    root = tmp_path / "export"
    process = subprocess.Popen([sys.executable, "-c", KILLED_EXPORT, str(root)], env=subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if root.exists() and any(name.startswith(".tmp-") for name in os.listdir(root)):
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "killed while writing"
    assert [name for name in os.listdir(root) if name.isdigit()] == [] and latest_version(str(root)) is None
    tokenizer = CharacterTokenizer("abc")
    model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=4, units=8, attention="dot")
    model.build()
    path = export_translator(model, tokenizer, tokenizer, str(root), max_length=6)
    assert path == str(root / "1") and latest_version(str(root)) == path


def test_latest_version_keeps_a_zero_padded_folder_name(tmp_path):
    for name in ("0002", "10"):
        os.makedirs(tmp_path / name)
    (tmp_path / "0002" / "saved_model.pb").write_bytes(b"")
    assert latest_version(str(tmp_path)) == str(tmp_path / "0002"), "10 holds no SavedModel"


def test_a_mixed_precision_translator_is_served_with_weights_in_its_compute_dtype(tmp_path, tf_only):
    model = small_model("transformer", {}, dropout=0.0, dtype="mixed_bfloat16")
    assert in_compute_dtype(small_model("transformer", {}, dropout=0.0)).dtype_policy.name == "float32"
    served_model = in_compute_dtype(model)
    assert {v.dtype for v in model.weights} == {"float32"}
    assert {v.dtype for v in served_model.weights} == {"bfloat16"}
    inputs = {"source_ids": np.array([[5, 6, 7, 0], [8, 9, 10, 11]]), "target_ids": np.array([[1, 5, 6], [1, 8, 0]])}
    # The same bfloat16 products; only the LayerNorms' float32 parameters are rounded.
    np.testing.assert_allclose(np.asarray(served_model(inputs), "float32"), np.asarray(model(inputs), "float32"),
                               atol=0.1)
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    path = export_translator(model, tokenizer, tokenizer, str(tmp_path / "m"), max_length=10, n_best=0)
    reply = tf_only.serve(path, {"source": ["keras", "abc"]}, variable_dtypes=True)
    assert reply["variable_dtypes"] == ["bfloat16"], "every floating variable of the SavedModel"
    expected = served_model.generate(tokenizer.tokenize(["keras", "abc"]).to_tensor(), max_length=10)
    assert reply["answers"][0]["outputs"]["token_ids"] == np.asarray(expected).tolist()


def test_an_unbuilt_layer_is_refused_before_anything_is_written(tmp_path):
    """export_translator builds its model while preparing the search; a
    layer handed to write_servable unbuilt has no weights to save."""
    import keras

    from kseq.export import write_servable

    layer = keras.layers.Dense(2)
    endpoints = {"serving_default": (lambda x: {"y": layer(x)}, [tf.TensorSpec([None, 3], tf.float32)])}
    with pytest.raises(ValueError, match="The Dense to export is not built yet: call it once, or train it"):
        write_servable(str(tmp_path / "m"), endpoints, [layer])
    assert not (tmp_path / "m").exists()
