"""Text normalization shared by every corpus reader."""

import sys
import unicodedata


def normalize_text(text: str) -> str:
    """Unicode NFC, whitespace runs collapsed to one space, ends stripped.

    NFC makes "é" one code point however the file spelled it, so tokenizers
    fitted on one corpus see the same characters in another. Collapsing
    also turns tabs and newlines into spaces, which keeps TSV caches
    one-record-per-line.

    Args:
        text: a string.

    Returns:
        The normalized string ("" when `text` is only whitespace).

    Example:
    >>> normalize_text("  Dieu\\tcre\\u0301a \\n les cieux ")
    'Dieu créa les cieux'
    """
    return " ".join(unicodedata.normalize("NFC", text).split())


# What `str.split()` splits on (str.isspace): the whitespace `normalize_text`
# collapses, spelled out so that the in-graph twin collapses the same set.
WHITESPACE = "".join(chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace())


def normalize_text_op(texts):
    """Normalizes texts as `normalize_text` does, in TensorFlow ops, for the exports.

    A server gets what a client sends (decomposed accents from macOS or web
    forms, tabs, runs of spaces) and must see the text the model was trained on.

    Invalid UTF-8 becomes U+FFFD, then NFC (tensorflow_text's ICU
    normalizer, an op TF Serving links), whitespace runs to one space, ends
    stripped.

    Args:
        texts: tf.string (B,).

    Returns:
        tf.string (B,), "" where a text is blank.

    Example:
    >>> import tensorflow as tf
    >>> normalize_text_op(tf.constant(["  Dieu\\tcre\\u0301a \\n les cieux "])).numpy()[0].decode()
    'Dieu créa les cieux'
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    valid = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    composed = tf_text.normalize_utf8(valid, "NFC")
    collapsed = tf.strings.regex_replace(composed, f"[{WHITESPACE}]+", " ")
    return tf.strings.regex_replace(collapsed, "^ | $", "")
