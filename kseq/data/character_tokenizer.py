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
        return NUM_SPECIAL_IDS + len(self.characters)

    @classmethod
    def fit(cls, texts, max_characters=None):
        """Vocabulary of the most frequent characters of `texts`."""
        counts = collections.Counter(c for text in texts for c in text)
        ordered = sorted(counts, key=lambda c: (-counts[c], c))
        return cls(ordered[:max_characters])

    def tokenize(self, strings):
        """(B,) strings -> (B, None) int32 ragged ids (no BOS/EOS added)."""
        chars = tf.strings.unicode_split(tf.convert_to_tensor(strings), "UTF-8")
        return tf.ragged.map_flat_values(self._to_id.lookup, chars)

    def detokenize(self, ids):
        """(B, T) ids -> (B,) strings; stops at the first EOS, drops PAD/BOS,
        writes UNK (and ids out of range) as "⁇"."""
        ids, before_eos = output_ids_to_text_ids(ids, self.vocab_size)
        chars = tf.gather(self._to_char, tf.where(before_eos, ids, 0))
        return tf.strings.reduce_join(chars, axis=1)

    def save(self, path):
        """Writes the vocabulary as JSON, atomically (kseq._atomic)."""
        write_json_atomic(path, {"type": "character", "characters": self.characters})

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("type") != "character":
            raise ValueError(f"{path} is not a CharacterTokenizer vocabulary.")
        return cls(data["characters"])
