"""Character-level tokenizer with in-graph lookup tables."""

import collections
import json

import tensorflow as tf

from kseq._atomic import write_json_atomic
from kseq.data.detokenize import output_ids_to_text_ids
from kseq.special_ids import NUM_SPECIAL_IDS, UNK_ID

UNKNOWN_TEXT = "\u2047"  # "⁇", what SentencePiece prints for an unknown piece


class CharacterTokenizer(tf.Module):
    """Maps each Unicode character to an id, and back, in TensorFlow ops.

    Ids 0-3 are PAD, BOS, EOS and UNK; characters take ids from 4 on.
    Unknown characters become UNK. Being a `tf.Module` made of lookup
    tables, it runs inside `tf.data` and inside an exported SavedModel.
    keras-hub's UnicodeCodepointTokenizer uses raw code points as ids; this
    one keeps a compact vocabulary with the reserved ids.

    Args:
        characters: the vocabulary, a sequence of distinct single characters.
        name: the `tf.Module`'s name. Default None.

    Raises:
        ValueError: `characters` is empty, has repeats or holds something
            other than single characters.

    Example:
    >>> tokenizer = CharacterTokenizer("abc")
    >>> tokenizer.tokenize(["cab", "ax"]).to_list()
    [[6, 4, 5], [4, 3]]
    >>> tokenizer.detokenize([[6, 4, 5, 2, 0]]).numpy()
    array([b'cab'], dtype=object)
    """

    def __init__(self, characters: str, name: str | None = None) -> None:
        super().__init__(name=name)
        characters = list(characters)
        if not characters:
            raise ValueError("`characters` must not be empty.")
        if len(set(characters)) != len(characters):
            raise ValueError("`characters` must be distinct.")
        bad = [c for c in characters if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"`characters` must be single characters; got {bad[:3]!r}.")
        self.characters = characters
        ids = tf.range(NUM_SPECIAL_IDS, NUM_SPECIAL_IDS + len(characters), dtype=tf.int32)
        self._to_id = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(characters), ids), default_value=UNK_ID
        )
        # id -> character; PAD/BOS/EOS vanish when joined, UNK shows as "⁇".
        specials = ["", "", "", UNKNOWN_TEXT]
        self._to_char = tf.constant(specials + characters)

    @property
    def vocab_size(self):
        """Ids from 0 to `vocab_size - 1` (kseq's 4 reserved ids included)."""
        return NUM_SPECIAL_IDS + len(self.characters)

    @classmethod
    def fit(cls, texts, max_characters=None):
        """Builds a tokenizer whose vocabulary is the most frequent characters of `texts`.

        Args:
            texts: an iterable of strings.
            max_characters: the most characters kept, most frequent first (ties
                in character order). Default None: all.

        Returns:
            A `CharacterTokenizer`.
        """
        counts = collections.Counter(c for text in texts for c in text)
        ordered = sorted(counts, key=lambda c: (-counts[c], c))
        return cls(ordered[:max_characters])

    def tokenize(self, strings):
        """Turns strings into ids, one per character (no BOS/EOS added).

        Args:
            strings: (B,) strings.

        Returns:
            (B, None) int32 ragged ids.
        """
        chars = tf.strings.unicode_split(tf.convert_to_tensor(strings), "UTF-8")
        return tf.ragged.map_flat_values(self._to_id.lookup, chars)

    def detokenize(self, ids):
        """Turns ids into strings, one per row.

        Each row stops at its first EOS; PAD and BOS are dropped; UNK (and ids
        out of range) are written as "⁇".

        Args:
            ids: (B, T) ids.

        Returns:
            (B,) strings.
        """
        ids, before_eos = output_ids_to_text_ids(ids, self.vocab_size)
        chars = tf.gather(self._to_char, tf.where(before_eos, ids, 0))
        return tf.strings.reduce_join(chars, axis=1)

    def save(self, path):
        """Writes the vocabulary as JSON, atomically (kseq._atomic).

        Args:
            path: the file to write.
        """
        write_json_atomic(path, {"type": "character", "characters": self.characters})

    @classmethod
    def load(cls, path):
        """Reads a tokenizer that `save` wrote.

        Args:
            path: the JSON file.

        Returns:
            A `CharacterTokenizer`.

        Raises:
            ValueError: the file is not a CharacterTokenizer vocabulary.
        """
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("type") != "character":
            raise ValueError(f"{path} is not a CharacterTokenizer vocabulary.")
        return cls(data["characters"])
