"""The conditioned generator's servable: a label, a class id or a vector in, text out."""

import tensorflow as tf

from kseq.data.text import normalize_text
from kseq.decoding import GreedySearch
from kseq.decoding.output import decoded_text
from kseq.export.publishing import write_servable
from kseq.export.requests import blank_out, normalized

LABEL_SPEC = tf.TensorSpec([None], tf.string, name="label")
CLASS_ID_SPEC = tf.TensorSpec([None], tf.int32, name="class_id")


def generate_from_condition_function(model, tokenizer, search, name="condition"):
    """Makes the function that generates text from conditions: a ConditionedGenerator's `search`, in TensorFlow ops.

    Args:
        model: a built kseq.models.ConditionedGenerator.
        tokenizer: the kseq tokenizer of its text.
        search: a kseq.decoding search.
        name: the input's name in error messages. Default "condition".

    Returns:
        A function `(condition) -> {"text": (B,) strings, "token_ids": (B, T) int32}`,
        the condition (B, N) float32 feature vectors or (B,) int32 class ids;
        a class id outside [0, K) fails the call with an error naming `name`.
    """

    def generate(condition):
        generated, _ = model.search(model.pack_condition(condition, name), search)
        text, ids = decoded_text(tokenizer, generated)
        return {"text": text, "token_ids": ids}

    return generate


def label_lookup(labels):
    """Makes a lookup table from label strings to class ids.

    Args:
        labels: distinct, non-blank strings in class id order; looked up as
            training read text (`normalize_text`).

    Returns:
        A `tf.lookup.StaticHashTable` giving int32 ids, -1 for unknown labels.

    Raises:
        ValueError: `labels` are not distinct strings, or one is blank.
    """
    if not all(isinstance(label, str) and normalize_text(label) for label in labels) or \
            len({normalize_text(label) for label in labels}) != len(labels):
        raise ValueError(f"`labels` must be distinct strings, none blank; got {list(labels)}.")
    keys = [normalize_text(label) for label in labels]  # the form requests are read in
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(keys), tf.range(len(labels), dtype=tf.int32)
        ),
        default_value=-1,
    )


def generate_from_label_function(model, tokenizer, search, labels, table, from_class_id=None):
    """Makes the function that generates text from label strings, read as training read text.

    A label not in `labels` fails the whole call with an InvalidArgumentError
    that lists the known labels and the unknown ones; a blank label gets an
    empty answer (text "", class id -1).

    Args:
        model: a built kseq.models.ConditionedGenerator of class ids.
        tokenizer: the kseq tokenizer of its text.
        search: a kseq.decoding search.
        labels: the class names, in id order.
        table: `label_lookup(labels)`.
        from_class_id: the generation from class ids it calls, e.g. the
            traced one the `by_class_id` signature serves. Default None:
            `generate_from_condition_function` with `search`.

    Returns:
        A function `(label (B,) tf.string) -> {"text": (B,) strings,
        "token_ids": (B, T) int32, "class_id": (B,) int32}`.
    """
    from_class_id = from_class_id or generate_from_condition_function(model, tokenizer, search, "class_id")
    known = ", ".join(labels)  # no quotes: the assertion message would escape them

    def generate(label):
        label, blank = normalized(label)
        class_id = table.lookup(label)
        unknown = tf.logical_and(class_id < 0, tf.logical_not(blank))
        check = tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(unknown)),
            [f"`label` must be one of: {known}; unknown labels:", tf.boolean_mask(label, unknown)],
        )
        with tf.control_dependencies([check]):
            class_id = tf.where(blank, 0, class_id)  # any class: the answer is emptied
        return blank_out(blank, {**from_class_id(class_id), "class_id": class_id})

    return generate


def export_conditioned_generator(
    model, tokenizer, export_dir: str, search=None, labels: list[str] | None = None, version: int | None = None,
    assets: dict[str, bytes] | None = None,
) -> str:
    """Writes `export_dir/<version>/`, a SavedModel that generates text, for a kseq.models.ConditionedGenerator.

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
      (an id outside [0, K) fails the request). Both decode with `search`,
      traced once: a label's text is its class id's.

    Written atomically (see `write_servable`).

    Args:
        model: the ConditionedGenerator.
        tokenizer: the kseq tokenizer of its text.
        export_dir: the folder of the versions (TF Serving's model folder).
        search: the kseq.decoding search. Default: greedy, 64 tokens; a seeded
            `kseq.decoding.Sampler` gives the same text for the same request.
        labels: the K class names, in id order; only for a model of class ids. Default None.
        version: an int >= 0 whose folder is absent or empty. Default None: the next free version.
        assets: {file name: bytes} for the version's `assets/` folder. Default None.

    Returns:
        The path of the new version.

    Raises:
        ValueError: `labels` given for a model of feature vectors, missing or
            not naming the K classes of a model of class ids, or a bad
            `export_dir` or `version`.
    """
    search = search or GreedySearch(64)
    model._ensure_built()
    if model.num_classes is None:
        return _export_vector_model(model, tokenizer, export_dir, search, labels, version, assets)
    if labels is None or len(labels) != model.num_classes:
        raise ValueError(
            f"`labels` must name the model's {model.num_classes} classes in id order; got "
            f"{None if labels is None else list(labels)}."
        )
    table = label_lookup(list(labels))
    # One generation from class ids, its search traced once: both signatures serve it.
    by_class_id = tf.function(generate_from_condition_function(model, tokenizer, search, "class_id"),
                              input_signature=[CLASS_ID_SPEC], autograph=False)
    endpoints = {
        "serving_default": (generate_from_label_function(model, tokenizer, search, labels, table, by_class_id),
                            [LABEL_SPEC]),
        "by_class_id": (by_class_id, [CLASS_ID_SPEC]),
    }
    warmup = {"serving_default": {"label": [labels[0]]}, "by_class_id": {"class_id": tf.constant([0], tf.int32)}}
    return write_servable(export_dir, endpoints, (model, tokenizer, table), version, assets, warmup=warmup)


def _export_vector_model(model, tokenizer, export_dir, search, labels, version, assets):
    """`export_conditioned_generator` for a model of feature vectors: one
    `serving_default` signature from "condition" (None, N). Returns the path."""
    if labels is not None:
        raise ValueError("`labels` names class ids; this model takes feature vectors "
                         f"(condition_dim={model.condition_dim}).")
    spec = tf.TensorSpec([None, model.condition_dim], tf.float32, name="condition")
    endpoints = {"serving_default": (generate_from_condition_function(model, tokenizer, search), [spec])}
    warmup = {"serving_default": {"condition": [[0.0] * model.condition_dim]}}
    return write_servable(export_dir, endpoints, (model, tokenizer), version, assets, warmup=warmup)
