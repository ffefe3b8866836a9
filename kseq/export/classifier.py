"""The classifier's servable: texts in, class probabilities and labels out."""

import tensorflow as tf

from kseq.export.publishing import write_servable
from kseq.export.requests import blank_out, id_matrix, length_within, normalized
from kseq.layers.recurrent import portable_recurrence

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")


def classify_function(model, tokenizer, labels, max_length=256):
    """Makes the function that classifies texts, in TensorFlow ops.

    Texts are read as training read text and cut to their first `max_length`
    tokens. A blank text gets an empty answer: label "", class id -1,
    probabilities 0.

    Args:
        model: a built kseq classifier (`model(ids)` gives (B, C) logits).
        tokenizer: the kseq tokenizer it was trained with.
        labels: the C class names, in id order.
        max_length: tokens read from each text, never more than a Transformer
            encoder's own `max_length`. Default 256.

    Returns:
        A function `(text (B,) tf.string) -> {"probabilities": (B, C) float32,
        "label": (B,) strings, "class_id": (B,) int32}`.

    Raises:
        ValueError: `max_length` is not an int >= 1.
    """
    label_table = tf.constant(list(labels))
    max_length = length_within(model.length_limit, max_length, "max_length")

    def classify(text):
        text, blank = normalized(text)
        ids = id_matrix(tokenizer.tokenize(text)[:, :max_length])
        with portable_recurrence(model):  # no cuDNN op: serves on any device
            logits = model(ids)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
        class_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return blank_out(blank, {"probabilities": probabilities, "label": tf.gather(label_table, class_id),
                                 "class_id": class_id})

    return classify


def export_classifier(model, tokenizer, labels, export_dir: str, version: int | None = None, max_length: int = 256,
                      assets: dict[str, bytes] | None = None) -> str:
    """Writes `export_dir/<version>/`, a SavedModel that classifies texts.

    Its `serving_default` maps {"text": tf.string (None,)} to
    {"probabilities": float32 (None, C), "label": tf.string (None,),
    "class_id": int32 (None,)} (see `classify_function`), with a warm-up
    request. Written atomically (see `write_servable`).

    Args:
        model: a built kseq classifier.
        tokenizer: the kseq tokenizer it was trained with.
        labels: names of the model's C classes, in id order.
        export_dir: the folder of the versions (TF Serving's model folder).
        version: an int >= 0 whose folder is absent or empty. Default None: the next free version.
        max_length: tokens read from each text. Default 256.
        assets: {file name: bytes} for the version's `assets/` folder. Default None.

    Returns:
        The path of the new version.

    Raises:
        ValueError: `labels` does not name the model's classes, or a bad
            `max_length`, `export_dir` or `version`.
    """
    if len(labels) != model.num_classes:
        raise ValueError(
            f"`labels` must name the model's {model.num_classes} classes; got {len(labels)}."
        )
    model._ensure_built()
    function = classify_function(model, tokenizer, labels, max_length)
    return write_servable(
        export_dir, {"serving_default": (function, [TEXT_SPEC])}, (model, tokenizer), version,
        assets, warmup={"serving_default": {"text": ["warm-up"]}},
    )
