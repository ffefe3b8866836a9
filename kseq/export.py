"""SavedModel export: strings in, strings out, search in the graph.

The exported signature needs only TensorFlow at serving time (no kseq, no
keras, no Python functions), so TF Serving can load it.
"""

import os
import shutil

import keras
import tensorflow as tf

from kseq.decoding import GreedySearch, trim_padding
from kseq.layers.recurrent import portable_recurrence
from kseq.special_ids import PAD_ID
from kseq._validation import check_positive_int

SOURCE_SPEC = tf.TensorSpec([None], tf.string, name="source")


def id_matrix(ragged_ids):
    """Ragged (B, None) ids -> int32 (B, L) right-padded with PAD, L >= 1 so
    that an all-empty batch still has a shape."""
    ids = ragged_ids.to_tensor(default_value=PAD_ID)
    ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(ids)[1])]])
    return tf.cast(ids, tf.int32)


def translate_function(model, source_tokenizer, target_tokenizer, max_length=64,
                       max_source_length=256, search=None, jit_compile=False):
    """strings (B,) -> {"translation": strings (B,), "token_ids": (B, T')}.

    Tokenizer, search and detokenizer, all in TensorFlow ops: the function
    the exported signature serves, usable in-process too. `search` is a
    kseq.decoding search (default: greedy up to `max_length` tokens); beam
    search serves its best hypothesis. Sources are cut to their first
    `max_source_length` tokens, and never more than the model's own
    `max_length` (a Transformer's position table): an over-long request gets
    the translation of its beginning, not an error.

    With `jit_compile`, the search (not the tokenizers, which XLA cannot
    compile) is compiled with XLA, once per input shape: requests are padded
    to a power-of-two number of rows and a multiple of 16 source tokens, so
    few shapes ever compile (decoding on a GPU is many times faster so).

    Raises:
        ValueError: the search would generate more tokens than the model's
            `max_length` allows.
    """
    search = search or GreedySearch(max_length)
    max_source_length = _length_within(model.length_limit, max_source_length, "max_source_length")
    if model.length_limit is not None and search.max_length > model.length_limit:
        raise ValueError(
            f"`max_length` (the search's, {search.max_length}) is over the model's "
            f"max_length {model.length_limit}."
        )
    run_search = _search_function(model, search, jit_compile)

    def translate(source):
        ids = id_matrix(source_tokenizer.tokenize(source)[:, :max_source_length])
        rows = tf.shape(ids)[0]
        if jit_compile:
            ids = _few_shapes(ids, max_source_length)
        generated, _ = run_search(ids)
        if generated.shape.rank == 3:  # beam search: (B, N, L)
            generated = generated[:, 0]
        generated = trim_padding(generated[:rows])
        return {"translation": target_tokenizer.detokenize(generated), "token_ids": generated}

    return translate


def _search_function(model, search, jit_compile):
    """ids (B, S) -> the search's (ids, scores), compiled with XLA if asked."""
    if not jit_compile:
        return lambda ids: model.search(ids, search)
    return tf.function(
        lambda ids: model.search(ids, search),
        input_signature=[tf.TensorSpec([None, None], tf.int32)], jit_compile=True, autograph=False,
    )


_ROW_LADDER = [2**i for i in range(21)]


def _few_shapes(ids, max_columns, column_multiple=16):
    """(B, S) ids padded with PAD to the next power-of-two rows and multiple
    of `column_multiple` columns (at most `max_columns`)."""
    shape = tf.shape(ids)
    ladder = tf.constant(_ROW_LADDER, tf.int32)
    rows = tf.gather(ladder, tf.searchsorted(ladder, shape[:1]))[0]
    columns = tf.minimum((shape[1] + column_multiple - 1) // column_multiple * column_multiple, max_columns)
    columns = tf.maximum(columns, shape[1])
    return tf.pad(ids, [[0, rows - shape[0]], [0, columns - shape[1]]], constant_values=PAD_ID)


def _length_within(limit, length, name):
    """`length` checked, and lowered to the model's `limit` (None: none)."""
    length = check_positive_int(name, length)
    return length if limit is None else min(length, limit)


def next_version(export_dir):
    """1 + the highest numeric version under `export_dir` (TF Serving layout)."""
    if not os.path.isdir(export_dir):
        return 1
    versions = [int(name) for name in os.listdir(export_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def export_translator(
    model, source_tokenizer, target_tokenizer, export_dir, version=None, max_length=64,
    max_source_length=256, search=None, assets=None, jit_compile=False,
):
    """Writes `export_dir/<version>/`, a SavedModel with `serving_default`:
    {"source": tf.string (None,)} -> {"translation": tf.string (None,),
    "token_ids": int32 (None, None)}, decoding with `search` (see
    `translate_function`; `jit_compile` serves the search compiled by XLA,
    which TF Serving does on a GPU or CPU build with XLA). `assets` ({file
    name: bytes}, e.g. the vocabulary) are written to the version's
    `assets/` folder. Written atomically (see `write_servable`).

    Returns:
        The path of the new version.
    """
    model._ensure_built()
    function = translate_function(
        model, source_tokenizer, target_tokenizer, max_length, max_source_length, search,
        jit_compile,
    )
    return write_servable(
        export_dir, {"serving_default": (function, [SOURCE_SPEC])},
        (model, source_tokenizer, target_tokenizer), version, assets,
    )


def write_servable(export_dir, endpoints, resources, version=None, assets=None):
    """Writes `export_dir/<version>/` (default: the next free version).

    Args:
        endpoints: {signature name: (function, input_signature)}.
        resources: the models and tokenizers whose variables and tables the
            functions use. A kseq tokenizer (CharacterTokenizer,
            SubwordTokenizer, KerasHubTokenizer) is a `tf.Module`: tracking it
            saves its lookup tables and tensorflow_text resources (a keras-hub
            layer's too), so the SavedModel holds the vocabulary. A bare
            keras-hub tokenizer is refused (its ids are not kseq's: wrap it
            with `kseq.data.tokenizers.from_keras_hub`).
        assets: {file name: bytes} for the version's `assets/` folder.
        version: an int >= 0 whose folder is absent or empty (a version is
            never overwritten: a non-empty one raises ValueError before
            anything is written); None, the next free version.

    The SavedModel is written to a temporary folder beside the target and
    renamed when complete, so a crash never leaves a half-written version.

    Returns:
        The path of the new version.
    """
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise ValueError(f"`export_dir` {export_dir!r} exists and is not a directory.")
    if version is not None:
        version = _check_version(export_dir, version)
    for resource in resources:
        _check_not_bare_keras_hub(resource)
    # ExportArchive saves the variables and lookup tables the functions use,
    # not the Keras objects, so nothing but TensorFlow is needed to serve.
    archive = keras.export.ExportArchive()
    for resource in resources:
        archive.track(resource)
    for name, (function, signature) in endpoints.items():
        archive.add_endpoint(name, function, input_signature=signature)
    os.makedirs(export_dir, exist_ok=True)
    temporary = os.path.join(export_dir, f".tmp-{'next' if version is None else version}-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        archive.write_out(temporary, verbose=False)
        for name, content in (assets or {}).items():
            os.makedirs(os.path.join(temporary, "assets"), exist_ok=True)
            with open(os.path.join(temporary, "assets", name), "wb") as f:
                f.write(content)
        return _publish(temporary, export_dir, version)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _check_not_bare_keras_hub(resource):
    """A keras-hub tokenizer numbers its own vocabulary (no PAD/BOS/EOS/UNK
    at 0-3): a model trained on kseq's ids would get the wrong ones."""
    if type(resource).__module__.startswith("keras_hub") and hasattr(resource, "detokenize"):
        raise ValueError(
            f"Got a bare keras-hub {type(resource).__name__} as a tokenizer; wrap it with "
            "kseq.data.tokenizers.from_keras_hub(tokenizer) (the same wrapper the model's "
            "training data went through) so that ids 0-3 are kseq's PAD, BOS, EOS, UNK."
        )


def _check_version(export_dir, version):
    """An explicit version: an int >= 0 (or its digits) whose folder is
    absent or empty; a version is never overwritten."""
    if isinstance(version, str) and version.isdigit():
        version = int(version)
    version = check_positive_int("version", version, allow_zero=True)
    final = os.path.join(export_dir, str(version))
    if os.path.exists(final) and (not os.path.isdir(final) or os.listdir(final)):
        raise ValueError(
            f"Export version {final!r} already exists and is not empty; pick another "
            "`version` or leave `version=None` for the next free one. Versions are "
            "never overwritten."
        )
    return version


def _publish(temporary, export_dir, version):
    """Renames the finished SavedModel to `export_dir/<version>` and returns
    that path. With `version=None`, a version that another export took
    meanwhile moves this one to the next free number."""
    for _ in range(100):  # other exports racing for the same numbers
        chosen = next_version(export_dir) if version is None else version
        final = os.path.join(export_dir, str(chosen))
        try:
            if os.path.isdir(final) and not os.listdir(final):
                os.rmdir(final)  # an empty leftover folder
            os.rename(temporary, final)
            return final
        except OSError:
            if version is not None or not os.path.exists(final):
                _check_version(export_dir, chosen)  # the clear error if taken
                raise
    raise OSError(f"No free version under {export_dir!r} after 100 tries.")


PROMPT_SPEC = tf.TensorSpec([None], tf.string, name="prompt")


def continue_function(model, tokenizer, search, max_prompt_length=256):
    """prompts (B,) -> {"continuation": strings (B,), "token_ids": (B, T')}:
    a language model's `search` from the last `max_prompt_length` tokens of
    each prompt (an empty prompt starts a new document), in TensorFlow ops."""
    max_prompt_length = _length_within(model.length_limit, max_prompt_length, "max_prompt_length")

    def continue_text(prompt):
        ids = tokenizer.tokenize(prompt)
        generated, _ = model.search(id_matrix(ids[:, -max_prompt_length:]), search)
        if generated.shape.rank == 3:  # beam search: (B, N, L)
            generated = generated[:, 0]
        generated = trim_padding(generated)
        return {"continuation": tokenizer.detokenize(generated), "token_ids": generated}

    return continue_text


def export_language_model(
    model, tokenizer, export_dir, search, version=None, max_prompt_length=256, assets=None
):
    """Writes `export_dir/<version>/` with `serving_default`:
    {"prompt": tf.string (None,)} -> {"continuation": tf.string (None,),
    "token_ids": int32 (None, None)} (see `continue_function`); a seeded
    `kseq.decoding.Sampler` gives the same continuation for the same prompt.

    Returns:
        The path of the new version.
    """
    model._ensure_built()
    function = continue_function(model, tokenizer, search, max_prompt_length)
    return write_servable(
        export_dir, {"serving_default": (function, [PROMPT_SPEC])}, (model, tokenizer),
        version, assets,
    )


TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")


def classify_function(model, tokenizer, labels, max_length=256):
    """texts (B,) -> {"probabilities": (B, C), "label": strings (B,),
    "class_id": int32 (B,)}, the first `max_length` tokens of each text
    (never more than a Transformer encoder's own `max_length`) classified,
    in TensorFlow ops (an empty text gets the model's prior)."""
    label_table = tf.constant(list(labels))
    max_length = _length_within(model.length_limit, max_length, "max_length")

    def classify(text):
        ids = id_matrix(tokenizer.tokenize(text)[:, :max_length])
        with portable_recurrence(model):  # no cuDNN op: serves on any device
            logits = model(ids)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
        class_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "label": tf.gather(label_table, class_id),
                "class_id": class_id}

    return classify


def export_classifier(model, tokenizer, labels, export_dir, version=None, max_length=256,
                      assets=None):
    """Writes `export_dir/<version>/` with `serving_default`:
    {"text": tf.string (None,)} -> {"probabilities": float32 (None, C),
    "label": tf.string (None,), "class_id": int32 (None,)}; `labels` names
    the C classes in id order.

    Returns:
        The path of the new version.
    """
    if len(labels) != model.num_classes:
        raise ValueError(
            f"`labels` must name the model's {model.num_classes} classes; got {len(labels)}."
        )
    model._ensure_built()
    function = classify_function(model, tokenizer, labels, max_length)
    return write_servable(
        export_dir, {"serving_default": (function, [TEXT_SPEC])}, (model, tokenizer), version,
        assets,
    )


LABEL_SPEC = tf.TensorSpec([None], tf.string, name="label")
CLASS_ID_SPEC = tf.TensorSpec([None], tf.int32, name="class_id")


def generate_from_condition_function(model, tokenizer, search, name="condition"):
    """conditions (B, N) float32 or (B,) int32 class ids -> {"text":
    strings (B,), "token_ids": (B, T')}: a ConditionedGenerator's `search`,
    in TensorFlow ops. Class ids outside [0, K) fail the call with an error
    naming `name`."""

    def generate(condition):
        generated, _ = model.search(model.pack_condition(condition, name), search)
        if generated.shape.rank == 3:  # beam search: (B, N, L)
            generated = generated[:, 0]
        generated = trim_padding(generated)
        return {"text": tokenizer.detokenize(generated), "token_ids": generated}

    return generate


def label_lookup(labels):
    """A lookup table from label strings to class ids (-1 for unknown ones)."""
    if len(set(labels)) != len(labels) or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"`labels` must be distinct strings; got {list(labels)}.")
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(labels)), tf.range(len(labels), dtype=tf.int32)
        ),
        default_value=-1,
    )


def generate_from_label_function(model, tokenizer, search, labels, table):
    """label strings (B,) -> {"text", "token_ids", "class_id"}. A label not
    in `labels` (exact match) fails the whole call with an
    InvalidArgumentError that lists the known labels and the unknown ones."""
    from_class_id = generate_from_condition_function(model, tokenizer, search, "class_id")
    known = ", ".join(labels)  # no quotes: the assertion message would escape them

    def generate(label):
        class_id = table.lookup(label)
        unknown = class_id < 0
        check = tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(unknown)),
            [f"`label` must be one of: {known}; unknown labels:", tf.boolean_mask(label, unknown)],
        )
        with tf.control_dependencies([check]):
            class_id = tf.identity(class_id)
        return {**from_class_id(class_id), "class_id": class_id}

    return generate


def export_conditioned_generator(
    model, tokenizer, export_dir, search=None, labels=None, version=None, assets=None
):
    """Writes `export_dir/<version>/` for a kseq.models.ConditionedGenerator,
    decoding with `search` (default greedy, 64 tokens; a seeded
    `kseq.decoding.Sampler` gives the same text for the same request).

    Signatures:
    - a model of feature vectors (`condition_dim=N`): `serving_default`
      {"condition": float32 (None, N)} -> {"text": tf.string (None,),
      "token_ids": int32 (None, None)};
    - a model of class ids (`num_classes=K`, with `labels` naming the K
      classes in id order): `serving_default` {"label": tf.string (None,)}
      -> {"text", "token_ids", "class_id": int32 (None,)}, the labels
      mapped by an in-graph lookup table (exact match; an unknown label
      fails the request with an error listing the known labels), and
      `by_class_id` {"class_id": int32 (None,)} -> {"text", "token_ids"}
      (an id outside [0, K) fails the request).

    Written atomically (see `write_servable`); `assets` ({file name: bytes})
    go to the version's `assets/` folder.

    Returns:
        The path of the new version.
    """
    search = search or GreedySearch(64)
    model._ensure_built()
    if model.num_classes is None:
        if labels is not None:
            raise ValueError("`labels` names class ids; this model takes feature vectors "
                             f"(condition_dim={model.condition_dim}).")
        spec = tf.TensorSpec([None, model.condition_dim], tf.float32, name="condition")
        endpoints = {"serving_default": (generate_from_condition_function(model, tokenizer, search),
                                         [spec])}
        return write_servable(export_dir, endpoints, (model, tokenizer), version, assets)
    if labels is None or len(labels) != model.num_classes:
        raise ValueError(
            f"`labels` must name the model's {model.num_classes} classes in id order; got "
            f"{None if labels is None else list(labels)}."
        )
    table = label_lookup(list(labels))
    endpoints = {
        "serving_default": (generate_from_label_function(model, tokenizer, search, labels, table),
                            [LABEL_SPEC]),
        "by_class_id": (generate_from_condition_function(model, tokenizer, search, "class_id"),
                        [CLASS_ID_SPEC]),
    }
    return write_servable(export_dir, endpoints, (model, tokenizer, table), version, assets)


def latest_version(export_dir):
    """The path of the highest numeric version under `export_dir` that holds
    a complete SavedModel (`saved_model.pb`), or None if there is none."""
    if not os.path.isdir(export_dir):
        return None
    versions = [int(name) for name in os.listdir(export_dir) if name.isdigit()
                and os.path.isfile(os.path.join(export_dir, name, "saved_model.pb"))]
    return os.path.join(export_dir, str(max(versions))) if versions else None
