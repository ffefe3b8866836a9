"""docs/SERVING.md's REST bodies are what TF Serving reads and writes.

Every documented predict request is read the way TF Serving's REST layer
reads JSON (tensorflow_serving/util/json_tensor.cc: `instances` rows
stacked along a new batch axis, `inputs` columns as given, strings as
UTF-8, {"b64": ...} as bytes, integers only where the input is an
integer), run through the signature it names in a tiny export of the same
kind, and the outputs are written back the way TF Serving writes them (a
row object per instance, or the bare value with one output; an `outputs`
object, or the bare value). The documented response must then have the
same structure: the same keys, the same nesting and fixed sizes, the same
JSON types. A tiny random model's values differ from the documented ones;
the structure cannot. Every signature of every export is documented in
both forms, and README's curl bodies run too.
"""

import base64
import importlib
import json
import os
import re
import string
import subprocess
import sys
from collections.abc import Mapping

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.data import CharacterTokenizer
from kseq.decoding import BeamSearch, GreedySearch, Limits
from kseq.export import (
    export_classifier, export_conditioned_generator, export_language_model, export_translator,
)
from kseq.models import ConditionedGenerator, RNNLanguageModel, SequenceClassifier
from support import small_model, subprocess_env

importlib.import_module("tensorflow_text")  # registers the text ops the exports use

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVING_MD = os.path.join(ROOT, "docs", "SERVING.md")
README = os.path.join(ROOT, "README.md")
LABELS = ["rotten", "fresh"]  # the Rotten Tomatoes labels the docs show, in id order
BLOCK = re.compile(r"<!-- rest: ([^>]*?) -->\n```json\n(.*?)\n```", re.S)


# TF Serving's JSON <-> tensor rules ---------------------------------------

def is_object(value):
    """A named-input object: a JSON object that is not a {"b64": ...} value."""
    return isinstance(value, dict) and not is_b64(value)


def is_b64(value):
    return isinstance(value, dict) and list(value) == ["b64"] and isinstance(value["b64"], str)


def json_shape(value):
    """The dense shape of a JSON value, read from first elements as TF
    Serving reads it: a list adds a dimension of its length."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def leaves(value, shape, path="$"):
    """The values of a JSON tensor in row-major order; raises unless every
    list at each level has the shape's size and values sit at its rank."""
    if not shape:
        if isinstance(value, list):
            raise ValueError(f"{path}: a list below the tensor's rank {len(shape)}")
        return [value]
    if not isinstance(value, list) or len(value) != shape[0]:
        raise ValueError(f"{path}: expected a list of {shape[0]}, got {json.dumps(value)[:60]}")
    return [leaf for index, item in enumerate(value) for leaf in leaves(item, shape[1:], f"{path}[{index}]")]


def tensor_value(value, dtype):
    """One JSON leaf as TF Serving converts it for a tensor of `dtype`."""
    if dtype == tf.string:
        if is_b64(value):
            return base64.b64decode(value["b64"], validate=True)
        if isinstance(value, str):
            return value.encode("utf-8")
    elif dtype.is_integer:
        if isinstance(value, int) and not isinstance(value, bool):  # 1.0 is refused
            return value
    elif dtype.is_floating:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    elif dtype == tf.bool and isinstance(value, bool):
        return value
    raise ValueError(f"JSON value {json.dumps(value)} is not of the expected type {dtype.name}")


def json_tensor(value, spec, name):
    """A JSON value (a scalar or nested lists) as a tensor of `spec`'s dtype."""
    shape = json_shape(value)
    values = [tensor_value(leaf, spec.dtype) for leaf in leaves(value, shape, name)]
    array = np.array(values, dtype=object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype)
    tensor = tf.constant(array.reshape(shape), spec.dtype)
    if not spec.shape.is_compatible_with(tensor.shape):
        raise ValueError(f"input {name!r}: shape {tensor.shape} does not fit the signature's {spec.shape}")
    return tensor


def request_tensors(body, specs):
    """{input name: tensor} from a predict request's JSON body, by TF
    Serving's rules; `specs` are the signature's {input name: TensorSpec}.
    Stricter than TF Serving in one way: an `inputs` object naming an input
    the signature lacks is refused (TF Serving ignores it)."""
    if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
        raise ValueError("a request holds exactly one of 'instances' and 'inputs'")
    if not isinstance(body.get("signature_name", ""), str):
        raise ValueError("'signature_name' must be a string")
    if "instances" in body:
        rows = body["instances"]
        if not isinstance(rows, list) or not rows:
            raise ValueError("'instances' must be a non-empty list")
        objects = is_object(rows[0])
        if not objects and len(specs) > 1:
            raise ValueError(f"'instances' is a plain list, but the signature takes {sorted(specs)}")
        columns = {name: [] for name in specs}
        for index, row in enumerate(rows):
            if is_object(row) != objects:
                raise ValueError(f"instance {index}: objects and plain values mixed")
            row = row if objects else {next(iter(specs)): row}
            if set(row) != set(specs):
                raise ValueError(f"instance {index}: keys {sorted(row)} must be the inputs {sorted(specs)}")
            for name, value in row.items():
                if columns[name] and json_shape(value) != json_shape(columns[name][0]):
                    raise ValueError(f"instance {index}: {name!r} has another shape than instance 0's")
                columns[name].append(value)
        return {name: json_tensor(values, specs[name], name) for name, values in columns.items()}
    given = body["inputs"]
    if not is_object(given):
        if len(specs) > 1:
            raise ValueError(f"'inputs' is a plain value, but the signature takes {sorted(specs)}")
        given = {next(iter(specs)): given}
    unknown, missing = set(given) - set(specs), set(specs) - set(given)
    if unknown or missing:
        raise ValueError(f"'inputs': unknown {sorted(unknown)}, missing {sorted(missing)}")
    return {name: json_tensor(given[name], specs[name], name) for name in specs}


def json_leaf(value, name):
    """A tensor element as TF Serving writes it: floats with a decimal
    point, ints as ints, strings as JSON strings ({"b64": ...} for an
    output named *_bytes)."""
    if isinstance(value, bytes):
        if name.endswith("_bytes"):
            return {"b64": base64.b64encode(value).decode("ascii")}
        return value.decode("utf-8")  # not UTF-8: TF Serving would write broken JSON
    if isinstance(value, (np.floating, float)):
        return float(value)
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    return int(value)


def json_values(name, tensor):
    array = tensor.numpy() if hasattr(tensor, "numpy") else np.asarray(tensor)

    def convert(item):
        return [convert(part) for part in item] if isinstance(item, np.ndarray) else json_leaf(item, name)

    return convert(array)


def response_body(outputs, form):
    """The JSON TF Serving answers with for `outputs` ({name: tensor}) to a
    request in `form` ("instances" or "inputs")."""
    columns = {name: json_values(name, tensor) for name, tensor in sorted(outputs.items())}
    if form == "inputs":
        return {"outputs": columns if len(columns) > 1 else next(iter(columns.values()))}
    sizes = {name: len(column) if isinstance(column, list) else None for name, column in columns.items()}
    if None in sizes.values() or len(set(sizes.values())) != 1:
        raise ValueError(f"row format needs every output batched alike; sizes {sizes}")
    rows = [{name: column[row] for name, column in columns.items()} for row in range(next(iter(sizes.values())))]
    return {"predictions": rows if len(columns) > 1 else [next(iter(row.values())) for row in rows]}


def json_type(dtype):
    return str if dtype == tf.string else bool if dtype == tf.bool else int if dtype.is_integer else float


def check_tensor_json(value, dims, dtype, where):
    """`value` is a dense JSON tensor of len(dims) dimensions whose known
    sizes (ints in `dims`) match, holding JSON values of `dtype`'s type."""
    shape = json_shape(value)
    assert len(shape) == len(dims), f"{where}: {len(shape)} nested levels, expected {len(dims)}"
    assert all(size == dim for size, dim in zip(shape, dims) if dim is not None), (
        f"{where}: shape {shape}, expected {dims}")
    assert all(size > 0 for size in shape), f"{where}: show values, not an empty list"
    values = leaves(value, shape, where)
    expected = json_type(dtype)
    assert all(type(leaf) is expected for leaf in values), f"{where}: values must be JSON {expected.__name__}s"


def check_like(documented, actual, output_specs, form, rows, where):
    """The documented response has the structure of TF Serving's `actual`
    one: keys, nesting, fixed sizes (the batch, N, C) and JSON types."""
    key = "predictions" if form == "instances" else "outputs"
    assert list(documented) == [key] == list(actual), f"{where}: a {form} response is {{{key!r}: ...}}"
    names = sorted(output_specs)

    def check_outputs(doc, act, batch_dims, at):
        if len(names) == 1:  # one output: its name is omitted
            doc, act = {names[0]: doc}, {names[0]: act}
        assert isinstance(doc, dict) and sorted(doc) == names == sorted(act), (
            f"{at}: outputs {sorted(doc) if isinstance(doc, dict) else doc!r}, expected {names}")
        for name in names:
            spec = output_specs[name]
            dims = batch_dims + [dim for dim in spec.shape.as_list()[1:]]
            check_tensor_json(act[name], dims, spec.dtype, f"{at}.{name} (as served)")
            check_tensor_json(doc[name], dims, spec.dtype, f"{at}.{name}")

    if form == "instances":
        assert isinstance(documented[key], list) and len(documented[key]) == len(actual[key]) == rows, (
            f"{where}: one prediction a request row ({rows})")
        for index, (doc, act) in enumerate(zip(documented[key], actual[key])):
            check_outputs(doc, act, [], f"{where}.predictions[{index}]")
    else:
        check_outputs(documented[key], actual[key], [rows], f"{where}.outputs")


def signature_specs(signature):
    return signature.structured_input_signature[1], signature.structured_outputs


def serve(loaded, body):
    """(outputs, rows): `body` run through the signature it names, as TF Serving would."""
    signature = loaded.signatures[body.get("signature_name", "serving_default")]
    tensors = request_tensors(body, signature_specs(signature)[0])
    return signature(**tensors), int(next(iter(tensors.values())).shape[0])


# The documented bodies ------------------------------------------------------

def documented_blocks():
    """[{export, signature, form, kind, body}] of docs/SERVING.md's marked
    JSON blocks (`<!-- rest: export=... signature=... form=... kind=... -->`)."""
    if not os.path.exists(SERVING_MD):
        return []
    text = open(SERVING_MD, encoding="utf-8").read()
    blocks = []
    for marker, body in BLOCK.findall(text):
        fields = dict(field.split("=", 1) for field in marker.split())
        blocks.append({**fields, "body": json.loads(body), "text": body})
    return blocks


def documented_pairs(kinds=("request", "response")):
    """{(export, signature, form): {kind: body}} for `kinds`."""
    pairs = {}
    for block in documented_blocks():
        if block["kind"] in kinds:
            key = (block["export"], block["signature"], block["form"])
            assert block["kind"] not in pairs.setdefault(key, {}), f"{key} documents two {block['kind']}s"
            pairs[key][block["kind"]] = block["body"]
    return pairs


PAIRS = documented_pairs()


def tiny_export(kind, root):
    """The path of a tiny, random export of `kind` under `root`, with the
    fixed sizes the docs show: 4 best translations, 2 classes (LABELS),
    conditions of 3 numbers. Seeded by kind: the same weights whichever
    kinds a worker makes, in whatever order."""
    keras.utils.set_random_seed(0)
    tokenizer = CharacterTokenizer(string.ascii_lowercase)  # 30 ids: support.VOCAB
    vocab = tokenizer.vocab_size
    if kind == "translator":
        return export_translator(
            small_model("rnn", {"attention": "dot"}), tokenizer, tokenizer, str(root / "translate"),
            search=BeamSearch(limits=Limits(8), beam_size=4), n_best=4)
    if kind == "language_model":
        return export_language_model(
            RNNLanguageModel(vocab, embed_dim=8, units=8), tokenizer, str(root / "language_model"),
            GreedySearch(6))
    if kind == "classifier":
        return export_classifier(
            SequenceClassifier(vocab, len(LABELS), embed_dim=8, units=8), tokenizer, LABELS,
            str(root / "classify"))
    if kind == "conditioned_generator":
        return export_conditioned_generator(
            ConditionedGenerator(vocab, num_classes=len(LABELS), embed_dim=8, units=8), tokenizer,
            str(root / "generate_reviews"), search=GreedySearch(6), labels=LABELS)
    return export_conditioned_generator(
        ConditionedGenerator(vocab, condition_dim=3, embed_dim=8, units=8), tokenizer,
        str(root / "generate"), search=GreedySearch(6))


EXPORT_KINDS = ("translator", "language_model", "classifier", "conditioned_generator",
                "conditioned_generator_vector")


class MadeWhenRead(Mapping):
    """{key: make(key)} for `keys`, each value made at its first read: a
    worker that runs a few of this file's tests pays only for the exports
    they read (an export and its load take seconds each)."""

    def __init__(self, keys, make):
        self._keys, self._make, self._made = tuple(keys), make, {}

    def __getitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._made:
            self._made[key] = self._make(key)
        return self._made[key]

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """({export kind: loaded SavedModel}, {export kind: its path}) of every
    kind of export (`tiny_export`), each made and loaded at its first read."""
    root = tmp_path_factory.mktemp("rest")
    paths = MadeWhenRead(EXPORT_KINDS, lambda kind: tiny_export(kind, root))
    return MadeWhenRead(EXPORT_KINDS, lambda kind: tf.saved_model.load(paths[kind])), paths


# The rules themselves, on TF Serving's own documented examples ------------

def test_the_conversion_follows_tf_servings_rules():
    specs = {"tag": tf.TensorSpec([None], tf.string), "signal": tf.TensorSpec([None, 5], tf.int32),
             "sensor": tf.TensorSpec([None, 2, 2], tf.float32)}
    rows = {"instances": [{"tag": "foo", "signal": [1, 2, 3, 4, 5], "sensor": [[1, 2], [3, 4]]},
                          {"tag": "bar", "signal": [3, 4, 1, 2, 5], "sensor": [[4, 5], [6, 8]]}]}
    columns = {"inputs": {"tag": ["foo", "bar"], "signal": [[1, 2, 3, 4, 5], [3, 4, 1, 2, 5]],
                          "sensor": [[[1, 2], [3, 4]], [[4, 5], [6, 8]]]}}
    from_rows, from_columns = request_tensors(rows, specs), request_tensors(columns, specs)
    for name in specs:
        assert from_rows[name].dtype == specs[name].dtype
        assert from_rows[name].numpy().tolist() == from_columns[name].numpy().tolist()
    assert from_rows["sensor"].shape == (2, 2, 2)
    one = {"source": tf.TensorSpec([None], tf.string)}
    bare, named = request_tensors({"instances": ["a", {"b64": "/w=="}]}, one), \
        request_tensors({"instances": [{"source": "a"}, {"source": {"b64": "/w=="}}]}, one)
    assert bare["source"].numpy().tolist() == named["source"].numpy().tolist() == [b"a", b"\xff"]
    assert request_tensors({"inputs": ["a"]}, one)["source"].numpy().tolist() == [b"a"]
    refused = [
        ({"instances": ["foo", "bar"]}, specs),                                  # several inputs, plain list
        ({"instances": [{"source": "a"}, "b"]}, one),                            # objects and values mixed
        ({"instances": [{"source": "a", "target": "b"}]}, one),                  # an unknown input
        ({"instances": []}, one),
        ({"instances": ["a"], "inputs": ["a"]}, one),
        ({"inputs": {"tag": ["foo"]}}, specs),                                   # missing inputs
        ({"inputs": {"class_id": [1.0]}}, {"class_id": tf.TensorSpec([None], tf.int32)}),  # not an int
        ({"inputs": {"class_id": ["1"]}}, {"class_id": tf.TensorSpec([None], tf.int32)}),
        ({"inputs": [[1.0, 2.0], [3.0]]}, {"x": tf.TensorSpec([None, 2], tf.float32)}),  # ragged
        ({"inputs": [[1.0, 2.0]]}, {"x": tf.TensorSpec([None, 3], tf.float32)}),  # the wrong width
    ]
    for body, body_specs in refused:
        with pytest.raises(ValueError):
            request_tensors(body, body_specs)
    outputs = {"score": tf.constant([0.5, 2.0]), "ids": tf.constant([[1, 2], [3, 0]]),
               "image_bytes": tf.constant([b"\xff", b"x"])}
    assert response_body(outputs, "instances") == {"predictions": [
        {"score": 0.5, "ids": [1, 2], "image_bytes": {"b64": "/w=="}},
        {"score": 2.0, "ids": [3, 0], "image_bytes": {"b64": "eA=="}}]}
    assert response_body({"score": outputs["score"]}, "instances") == {"predictions": [0.5, 2.0]}
    assert response_body({"score": outputs["score"]}, "inputs") == {"outputs": [0.5, 2.0]}
    assert response_body(outputs, "inputs")["outputs"]["ids"] == [[1, 2], [3, 0]]
    with pytest.raises(ValueError, match="batched alike"):
        response_body({"a": tf.constant([1, 2]), "b": tf.constant([1])}, "instances")


# The documentation ----------------------------------------------------------

def test_every_signature_of_every_export_is_documented_in_both_forms(exports):
    loaded, _ = exports
    blocks = documented_blocks()
    assert blocks, f"{SERVING_MD} holds no marked REST blocks"
    served = {(kind, name) for kind, module in loaded.items() for name in module.signatures}
    for form in ("instances", "inputs"):
        documented = {(export, signature) for export, signature, f in PAIRS if f == form}
        assert documented == served, (f"{form}: undocumented {sorted(served - documented)}, "
                                      f"no such signature {sorted(documented - served)}")
    for key, kinds in PAIRS.items():
        assert sorted(kinds) == ["request", "response"], f"{key}: {sorted(kinds)}"
        request = kinds["request"]
        assert request.get("signature_name") == key[1], f"{key}: the request names its signature"
        assert key[2] in request, f"{key}: a {key[2]} request"
    for block in blocks:
        assert len(block["text"].splitlines()) <= 4, (
            f"keep {block['export']} {block['signature']} {block['form']} {block['kind']} compact")


@pytest.mark.parametrize("key", sorted(PAIRS), ids=lambda key: "-".join(key))
def test_the_documented_request_runs_and_answers_as_documented(exports, key):
    export, signature_name, form = key
    loaded = exports[0][export]
    request, documented = PAIRS[key]["request"], PAIRS[key]["response"]
    inputs, output_specs = signature_specs(loaded.signatures[signature_name])
    outputs, rows = serve(loaded, request)
    actual = response_body(outputs, form)
    check_like(documented, actual, output_specs, form, rows, "-".join(key))
    if form == "instances" and len(inputs) == 1:  # bare values and one-key objects are the same request
        name = next(iter(inputs))
        other = [row[name] for row in request[form]] if is_object(request[form][0]) else \
            [{name: row} for row in request[form]]
        again = request_tensors({form: other}, inputs)
        assert again[name].numpy().tolist() == request_tensors(request, inputs)[name].numpy().tolist()


def test_the_documented_error_is_the_signatures_error(exports):
    errors = documented_pairs(("error_request", "error"))
    assert errors, "SERVING.md documents a failing request"
    for (export, _, form), kinds in errors.items():
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            serve(exports[0][export], kinds["error_request"])
        documented = kinds["error"]["error"].removesuffix(" ...")
        assert documented in str(raised.value), (documented, str(raised.value)[:500])


def serving_section():
    text = open(README, encoding="utf-8").read()
    return text.split("## Serving (TF Serving)", 1)[1].split("\n## ", 1)[0]


def test_readme_curl_bodies_run_and_answer_as_shown(exports):
    loaded = exports[0]["translator"]
    section = serving_section()
    curls = re.findall(r"curl -d '([^']*)'[^\n]*\n(?:# -> (.*)\n)?", section)
    assert {form for body, _ in curls for form in ("instances", "inputs") if form in json.loads(body)} == \
        {"instances", "inputs"}, "one curl example a form"
    for body, shown in curls:
        request = json.loads(body)
        form = "instances" if "instances" in request else "inputs"
        outputs, rows = serve(loaded, request)
        actual = response_body(outputs, form)
        if shown:
            specs = loaded.signatures[request.get("signature_name", "serving_default")].structured_outputs
            check_like(json.loads(shown), actual, specs, form, rows, f"README curl {body}")
    assert "docs/SERVING.md" in section


def test_the_docker_image_is_the_tensorflow_release_pinned_alike():
    tags = re.findall(r"tensorflow/serving:([\w.-]+)", serving_section())
    docs_tags = re.findall(r"tensorflow/serving:([\w.-]+)", open(SERVING_MD, encoding="utf-8").read())
    assert tags and docs_tags, "the docker commands pin the image"
    major_minor = ".".join(tf.__version__.split(".")[:2])
    for tag in tags + docs_tags:
        assert re.fullmatch(re.escape(major_minor) + r"\.\d+(-gpu)?", tag), (tag, tf.__version__)
    assert {tag.removesuffix("-gpu") for tag in tags + docs_tags} == {tags[0].removesuffix("-gpu")}


def test_saved_model_cli_show_lists_every_signature_without_the_text_ops(exports):
    """The docs' `saved_model_cli show --dir ... --all`, as written (no
    tensorflow_text import), on the translator export."""
    commands = re.findall(r"^saved_model_cli show --dir (\S+) --all$",
                          open(SERVING_MD, encoding="utf-8").read(), re.M)
    assert commands, "SERVING.md shows `saved_model_cli show --dir ... --all`"
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    path = exports[1]["translator"]
    shown = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True, text=True,
                           env=subprocess_env(), timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    listed = set(re.findall(r"signature_def\['(\w+)'\]", shown.stdout)) - {"__saved_model_init_op"}
    assert listed == set(exports[0]["translator"].signatures)
    inputs = set(re.findall(r"inputs\['(\w+)'\]", shown.stdout))
    assert inputs == {"source", "target"}
