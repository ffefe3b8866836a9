"""Text normalization shared by every corpus reader."""

import unicodedata


def normalize_text(text):
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
