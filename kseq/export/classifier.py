"""The classifier's servable: texts in, class probabilities and labels out."""

import tensorflow as tf

from kseq.export.publishing import write_servable
from kseq.export.requests import blank_out, id_matrix, length_within, normalized
from kseq.layers.recurrent import portable_recurrence

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")


def classify_function(model, tokenizer, labels, max_length=256):
    """texts (B,) -> {"probabilities": (B, C), "label": strings (B,),
    "class_id": int32 (B,)}, the first `max_length` tokens of each text
    (never more than a Transformer encoder's own `max_length`) classified,
    read as training read text, in TensorFlow ops. A blank text gets an
    empty answer: label "", class id -1, probabilities 0."""
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
        assets, warmup={"serving_default": {"text": ["warm-up"]}},
    )
