"""A Marian checkpoint's tokenizer (OPUS-MT's source.spm, target.spm and vocab.json) as a kseq tokenizer.

Marian numbers its vocabulary its own way (OPUS-MT: EOS 0, UNK 1, PAD the
last id) and has no BOS: its decoder starts from PAD. kseq's ids 0-3 are PAD,
BOS, EOS and UNK, so a Marian vocabulary of V ids becomes V + 1 kseq ids:
`marian_order` lists, for each kseq id, the Marian id whose row it takes
(PAD, PAD again as the decoder's start, EOS, UNK, then every other Marian id
in order). kseq's searches, masks and exports then need no special case; the
model loader (`kseq.pretrained`) orders the embedding rows the same way.
"""

import base64
import json

import numpy as np
import tensorflow as tf

from kseq._atomic import write_bytes_atomic
from kseq._compat import call_recreating_lost_resource
from kseq.data.detokenize import output_ids_to_text_ids
from kseq.data.text import WHITESPACE
from kseq.special_ids import BOS_ID, EOS_ID, NUM_SPECIAL_IDS, PAD_ID
from kseq._validation import check_choice

SIDES = ("source", "target")
# SentencePiece's word-boundary mark, which Marian's decoder turns into a space.
WORD_MARK = "\u2581"
# What transformers' `clean_up_tokenization_spaces` takes away, in its order.
CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))
# A language code (">>fr<<") that begins a piece of text: one token, looked up as it is.
LANGUAGE_CODE = r"(?s)^>>.*?<<"


def marian_order(size, pad_id, eos_id, unk_id):
    """The Marian id behind each kseq id.

    Args:
        size: V, the Marian vocabulary's ids 0..V-1.
        pad_id, eos_id, unk_id: Marian's PAD (its decoder's start too), EOS and UNK.

    Returns:
        (V + 1,) int64: [PAD, PAD, EOS, UNK, then the other ids ascending].

    Example:
    >>> marian_order(6, pad_id=5, eos_id=0, unk_id=1).tolist()
    [5, 5, 0, 1, 2, 3, 4]
    """
    specials = (pad_id, pad_id, eos_id, unk_id)
    others = [i for i in range(size) if i not in specials]
    return np.array(list(specials) + others, np.int64)


class MarianTokenizer(tf.Module):
    """One side of a Marian tokenizer, with kseq's interface and ids.

    The same ids and text as transformers' `MarianTokenizer`: special tokens
    written in the text (`</s>`, `<unk>`, `<pad>`) are tokens of their own;
    a language code (`>>fr<<`) beginning a piece of text is one token; the
    rest is cut into pieces by the side's SentencePiece model (its own
    normalization included) and each piece looked up in the side's
    vocabulary (UNK where it is missing); a source ends with EOS.
    Detokenizing skips the special tokens, joins the pieces with the
    SentencePiece model transformers decodes with (the source side's for a
    joint vocabulary, as transformers does, else the target's), turns word
    marks into spaces and strips the ends; `clean_up` applies transformers'
    `clean_up_tokenization_spaces`. Everything is TensorFlow ops
    (tensorflow_text's SentencePiece op and lookup tables): it runs in
    `tf.data` and inside an exported SavedModel.

    Args:
        proto: the side's SentencePiece model (source.spm or target.spm), bytes.
        vocabulary: {piece: Marian id} of the side (vocab.json, or
            target_vocab.json for separate vocabularies), ids 0..V-1.
        side: "source" (EOS appended) or "target".
        special_tokens: (EOS, UNK, PAD, any others) as the vocabulary spells them.
        decoding_proto: the SentencePiece model that joins pieces. Default None: `proto`.
        clean_up: transformers' `clean_up_tokenization_spaces`. Default False.
        name: the `tf.Module` name.

    Raises:
        ValueError: the vocabulary is not ids 0..V-1 once each, or lacks a special token.

    Load one with `kseq.pretrained.marian_tokenizers(folder)`.
    """

    def __init__(self, proto, vocabulary, side, special_tokens=("</s>", "<unk>", "<pad>"), decoding_proto=None,
                 clean_up=False, name=None):
        super().__init__(name=name)
        self.side = check_choice("side", side, SIDES)
        # A plain object: tf.Module would wrap a dict attribute for tracking.
        self.files = MarianFiles(bytes(proto), bytes(decoding_proto or proto),
                                 check_vocabulary(vocabulary, special_tokens), tuple(special_tokens), bool(clean_up))
        eos, unk, pad = (self.vocabulary[token] for token in self.special_tokens[:3])
        self.order = marian_order(len(self.vocabulary), pad, eos, unk)
        kseq_ids = np.zeros(len(self.vocabulary), np.int32)
        kseq_ids[self.order[1:]] = np.arange(1, len(self.order))
        kseq_ids[pad] = PAD_ID  # PAD's row serves BOS too; read as a token it is PAD
        pieces = sorted(self.vocabulary, key=self.vocabulary.get)
        self._to_kseq = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(pieces), tf.constant(kseq_ids[[self.vocabulary[p] for p
                                                                                        in pieces]])),
            default_value=int(kseq_ids[unk]))
        self._pieces = tf.constant([pieces[i] for i in self.order])
        skipped = {self.vocabulary[token] for token in self.special_tokens}
        self._skipped = tf.constant([i < NUM_SPECIAL_IDS or int(m) in skipped for i, m in enumerate(self.order)])
        self._split = "|".join(_escaped(token) for token in self.special_tokens)
        self._special = tf.constant(list(self.special_tokens))
        self._make_sentence_pieces()

    @property
    def vocabulary(self):
        """{piece: Marian id} of this side."""
        return self.files.vocabulary

    @property
    def special_tokens(self):
        """(EOS, UNK, PAD, others): the tokens skipped when detokenizing."""
        return self.files.special_tokens

    @property
    def clean_up(self):
        """Whether transformers' `clean_up_tokenization_spaces` is applied."""
        return self.files.clean_up

    @property
    def proto(self):
        """The side's SentencePiece model, bytes."""
        return self.files.proto

    @property
    def decoding_proto(self):
        """The SentencePiece model that joins pieces, bytes."""
        return self.files.decoding_proto

    def _make_sentence_pieces(self):
        import tensorflow_text as tf_text

        self._sentence_piece = tf_text.SentencepieceTokenizer(model=self.proto, out_type=tf.string)
        self._decoder = tf_text.SentencepieceTokenizer(model=self.decoding_proto, out_type=tf.string)
        self._eager = _EagerCalls(self)

    @property
    def vocab_size(self):
        """Ids from 0 to `vocab_size - 1`: the Marian vocabulary's and BOS."""
        return len(self.order)

    @tf.autograph.experimental.do_not_convert
    def tokenize(self, strings):
        """Turns strings into kseq's ids, EOS ending a source (no BOS).

        Args:
            strings: (B,) strings.

        Returns:
            (B, None) int32 ragged ids.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        if tf.executing_eagerly():
            return call_recreating_lost_resource(lambda: self._eager.tokenize(strings), self._make_sentence_pieces)
        return self._tokenize_in_graph(strings)

    @tf.autograph.experimental.do_not_convert
    def detokenize(self, ids):
        """Turns ids into strings, each row stopping at its first EOS, special tokens skipped.

        Args:
            ids: (B, T) ids.

        Returns:
            (B,) strings.
        """
        ids = tf.convert_to_tensor(ids, tf.int32)
        if tf.executing_eagerly():
            return call_recreating_lost_resource(lambda: self._eager.detokenize(ids), self._make_sentence_pieces)
        return self._detokenize_in_graph(ids)

    def _tokenize_in_graph(self, strings):
        import tensorflow_text as tf_text

        segments = tf_text.regex_split(strings, self._split, self._split)  # specials apart, as transformers splits
        text = segments.flat_values
        special = tf.reduce_any(tf.equal(text[:, None], self._special[None, :]), axis=1)
        coded = tf.logical_and(tf.logical_not(special), tf.strings.regex_full_match(text, LANGUAGE_CODE + ".*"))
        code = tf.strings.regex_replace(text, r"(?s)^(>>.*?<<).*$", r"\1")  # the code alone, e.g. ">>fr<<"
        rest = tf.where(special, "", tf.where(coded, tf.strings.regex_replace(text, LANGUAGE_CODE, ""), text))
        lead = tf.logical_or(special, coded)
        first = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(tf.where(special, text, code), lead),
                                                 tf.cast(lead, tf.int64))
        pieces = tf.concat([first, self._sentence_piece.tokenize(rest)], axis=1)
        ids = pieces.with_flat_values(self._to_kseq.lookup(pieces.flat_values))
        ids = segments.with_flat_values(ids).merge_dims(1, 2)
        if self.side == "source":
            ids = tf.concat([ids, tf.fill(tf.stack([ids.nrows(), 1]), EOS_ID)], axis=1)
        return tf.cast(ids, tf.int32)

    def _detokenize_in_graph(self, ids):
        ids, before_eos = output_ids_to_text_ids(ids, self.vocab_size)
        keep = tf.logical_and(before_eos, tf.logical_not(tf.gather(self._skipped, ids)))
        pieces = tf.gather(self._pieces, tf.ragged.boolean_mask(ids, keep))
        text = self._decoder.detokenize(pieces)
        text = tf.strings.regex_replace(text, WORD_MARK, " ")
        text = tf.strings.regex_replace(text, f"^[{WHITESPACE}]+|[{WHITESPACE}]+$", "")
        if self.clean_up:
            for before, after in CLEAN_UP:
                text = tf.strings.regex_replace(text, _escaped(before), after)
        return text

    def marian_ids(self, ids):
        """kseq ids as the checkpoint's own ids (BOS as PAD, Marian's decoder start).

        Args:
            ids: kseq ids, any shape.

        Returns:
            An int64 array of the same shape.
        """
        return self.order[np.asarray(ids, np.int64)]

    def kseq_ids(self, marian_ids):
        """The checkpoint's own ids as kseq's (PAD as kseq's PAD, 0).

        Args:
            marian_ids: Marian ids, any shape.

        Returns:
            An int64 array of the same shape.
        """
        inverse = np.zeros(len(self.order) - 1, np.int64)
        inverse[self.order[1:]] = np.arange(1, len(self.order))
        inverse[self.order[PAD_ID]] = PAD_ID
        return inverse[np.asarray(marian_ids, np.int64)]

    def id_to_piece(self, ids):
        """Names ids by their pieces, for plot labels: BOS is "<s>", the others the vocabulary's.

        Args:
            ids: ids, flattened to 1-D.

        Returns:
            A list of strings.
        """
        names = self.tokens()
        return [names[i] for i in np.asarray(ids).reshape(-1).tolist()]

    def tokens(self):
        """Every kseq id's token, in id order, each once: BOS (Marian's decoder start) named "<s>" or another free name.

        Returns:
            A list of `vocab_size` strings.
        """
        pieces = sorted(self.vocabulary, key=self.vocabulary.get)
        names = [pieces[i] for i in self.order]
        start = "<s>"
        while start in self.vocabulary:
            start = f"<kseq{start}"
        names[BOS_ID] = start
        return names

    def asset_files(self):
        """Gives what `save` writes, for an export's assets/ folder or a run's logdir.

        Returns:
            {"marian_<side>.json": bytes}.
        """
        return {f"marian_{self.side}.json": self._saved_json()}

    def save(self, path):
        """Writes the tokenizer as one JSON file, atomically; `load` (and `load_tokenizer`) read it.

        Args:
            path: the file to write.
        """
        write_bytes_atomic(path, self._saved_json())

    def _saved_json(self):
        saved = dict(type="marian", side=self.side, special_tokens=list(self.special_tokens),
                     clean_up=self.clean_up, vocabulary=self.vocabulary,
                     proto=base64.b64encode(self.proto).decode("ascii"),
                     decoding_proto=base64.b64encode(self.decoding_proto).decode("ascii"))
        return json.dumps(saved, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_saved(cls, saved):
        """Rebuilds a tokenizer from the JSON value `save` wrote.

        Args:
            saved: the parsed JSON.

        Returns:
            A `MarianTokenizer`.
        """
        return cls(base64.b64decode(saved["proto"]), saved["vocabulary"], saved["side"], saved["special_tokens"],
                   base64.b64decode(saved["decoding_proto"]), saved["clean_up"])

    @classmethod
    def load(cls, path):
        """Reads the tokenizer `save` wrote to `path`.

        Args:
            path: the JSON file.

        Returns:
            A `MarianTokenizer`.
        """
        with open(path, "rb") as f:
            return cls.from_saved(json.loads(f.read().decode("utf-8")))


class MarianFiles:
    """What a `MarianTokenizer` is made of: its SentencePiece models (bytes),
    vocabulary {piece: Marian id}, special tokens and clean-up flag."""

    def __init__(self, proto, decoding_proto, vocabulary, special_tokens, clean_up):
        self.proto, self.decoding_proto, self.vocabulary = proto, decoding_proto, vocabulary
        self.special_tokens, self.clean_up = special_tokens, clean_up


def check_vocabulary(vocabulary, special_tokens):
    """Checks a Marian vocabulary: {piece: id} with ids 0..V-1 once each, the special tokens in it.

    Args:
        vocabulary: the parsed vocab.json.
        special_tokens: the tokens it must hold.

    Returns:
        {piece: int id}.

    Raises:
        ValueError: what is wrong, naming a piece.
    """
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError("the vocabulary must be a JSON object {piece: id}.")
    ids = sorted(vocabulary.values())
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or ids != list(range(len(ids))):
        raise ValueError(f"the vocabulary's ids must be 0..{len(ids) - 1}, each once.")
    missing = [token for token in special_tokens if token not in vocabulary]
    if missing:
        raise ValueError(f"the vocabulary has no {missing[0]!r} token.")
    return {str(piece): int(i) for piece, i in vocabulary.items()}


def _escaped(text):
    """`text` as an RE2 pattern matching it literally."""
    return "".join(f"\\x{{{ord(c):x}}}" if not c.isalnum() else c for c in text)


class _EagerCalls:
    """tokenize/detokenize as `tf.function`s for eager calls; a plain object,
    so that SavedModels do not keep these functions."""

    def __init__(self, owner):
        strings = tf.TensorSpec([None], tf.string)
        self._tokenize_batch = tf.function(owner._tokenize_in_graph, input_signature=[strings], autograph=False)
        self._tokenize_any = tf.function(owner._tokenize_in_graph, autograph=False, reduce_retracing=True)
        self.detokenize = tf.function(owner._detokenize_in_graph, autograph=False, reduce_retracing=True)

    def tokenize(self, strings):
        if strings.shape.rank == 1:
            return self._tokenize_batch(strings)
        return self._tokenize_any(strings)
