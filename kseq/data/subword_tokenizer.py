"""SentencePiece subword tokenizer that runs in the graph and exports."""

import collections
import io

import sentencepiece
import tensorflow as tf
import tensorflow_text

from kseq._compat import call_recreating_lost_resource
from kseq._atomic import write_bytes_atomic
from kseq.data.detokenize import output_ids_to_text_ids
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from kseq._validation import check_choice, check_positive_int


class SubwordTokenizer(tf.Module):
    """A SentencePiece model applied with tensorflow_text's in-graph op.

    Ids 0-3 are PAD, BOS, EOS and UNK, as everywhere in kseq. Training uses
    identity normalization and byte fallback (characters outside the
    vocabulary become their UTF-8 bytes, never UNK), so for text that is
    already normalized (NFC, single spaces, as kseq.data's loaders produce)
    detokenize(tokenize(x)) == x. Being a `tf.Module` around the tensorflow_text op, it runs inside
    `tf.data` and inside an exported SavedModel (which then needs only
    tensorflow and tensorflow_text). One tokenizer can serve both languages
    (a joint vocabulary, for shared embeddings).

    Args:
        proto: the serialized SentencePiece model (bytes).

    Example:
    >>> texts = ["the cat sat", "the dog sat", "a cat ran"] * 30
    >>> tokenizer = SubwordTokenizer.train(texts, vocab_size=300)
    >>> ids = tokenizer.tokenize(["the cat ran", "zoë"])  # "zoë" is unseen
    >>> tokenizer.detokenize(ids.to_tensor()).numpy()[1].decode()
    'zoë'

    References:
        Kudo and Richardson, 2018, "SentencePiece"; Kudo, 2018 (unigram LM).
    """

    def __init__(self, proto, name=None):
        super().__init__(name=name)
        if not isinstance(proto, bytes) or not proto:
            raise ValueError("`proto` must be the non-empty bytes of a SentencePiece model.")
        self.proto = proto
        self._model = self._make_op()
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        specials = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
        if specials != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(
                "The SentencePiece model must use pad/bos/eos/unk ids 0/1/2/3 as kseq "
                f"does; it uses {specials}. Train it with SubwordTokenizer.train."
            )
        self._vocab_size = processor.get_piece_size()

    def _make_op(self):
        return tensorflow_text.SentencepieceTokenizer(model=self.proto, out_type=tf.int32)

    def _run(self, method, values):
        """Calls the op (recreated if TensorFlow lost its resource, see
        kseq._compat.call_recreating_lost_resource)."""
        def recreate():
            self._model = self._make_op()

        return call_recreating_lost_resource(lambda: getattr(self._model, method)(values), recreate)

    @property
    def vocab_size(self):
        return self._vocab_size

    @classmethod
    def train(cls, texts, vocab_size=8000, model_type="unigram", seed_sentences=200000):
        """Trains a SentencePiece model on `texts` (an iterable of strings).

        Args:
            texts: training sentences, already normalized.
            vocab_size: pieces in the vocabulary, special ids and the 256
                byte pieces included; a small text may give fewer (see
                `vocab_size` afterwards).
            model_type: "unigram" or "bpe".
            seed_sentences: the most sentences SentencePiece reads.
        """
        check_positive_int("vocab_size", vocab_size)
        check_choice("model_type", model_type, ("unigram", "bpe"))
        texts = [text for text in texts if text]
        if not texts:
            raise ValueError("`texts` must hold at least one non-empty string.")
        proto = io.BytesIO()
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(texts), model_writer=proto, vocab_size=vocab_size,
                model_type=model_type, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                unk_id=UNK_ID, character_coverage=1.0, normalization_rule_name="identity",
                input_sentence_size=seed_sentences, shuffle_input_sentence=True,
                hard_vocab_limit=False, byte_fallback=True, minloglevel=2,
            )
        except RuntimeError as error:  # e.g. vocab_size larger than the text allows
            raise ValueError(f"SentencePiece training failed: {error}") from None
        return cls(proto.getvalue())

    def tokenize(self, strings):
        """(B,) strings -> (B, None) int32 ragged ids (no BOS/EOS added)."""
        return self._run("tokenize", tf.convert_to_tensor(strings, tf.string))

    def detokenize(self, ids):
        """(B, T) ids -> (B,) strings; stops at the first EOS, drops PAD and
        BOS, writes UNK (and ids out of range) as "⁇"."""
        ids, before_eos = output_ids_to_text_ids(ids, self.vocab_size)
        keep = tf.logical_and(before_eos, ids > EOS_ID)
        return self._run("detokenize", tf.ragged.boolean_mask(ids, keep))

    def save(self, path):
        """Writes the SentencePiece model file, atomically (temp file + rename)."""
        write_bytes_atomic(path, self.proto)

    def id_to_piece(self, ids):
        """1-D ids -> their pieces as Python strings (for plot labels)."""
        return [piece.decode("utf-8") for piece in self._run("id_to_string", ids).numpy()]

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            return cls(f.read())


# Pieces every SubwordTokenizer holds whatever its text: PAD, BOS, EOS, UNK
# and the 256 byte-fallback pieces.
BASE_PIECES = 4 + 256


def vocab_size_for(texts, limit, min_count=10):
    """A vocabulary size that fits `texts`, at most `limit`.

    The base pieces, one piece per distinct character, and one per word seen
    at least `min_count` times: words that often are worth a piece of their
    own; rarer strings (numbers, codes, dates, names) are better spelled
    out from pieces the model sees often. On a large, varied corpus the
    count passes any usual `limit`; on a small or repetitive one (a user's
    dates or codes) it stays small, so that SentencePiece does not fill the
    vocabulary with whole rare strings, each seen a few times.

    Example:
    >>> vocab_size_for(["1984-03-03 is a date", "2001-01-01 is a date"] * 10, limit=4000)
    280
    """
    check_positive_int("limit", limit)
    words, characters = collections.Counter(), set()
    for text in texts:
        words.update(text.split())
        characters.update(text)
    frequent = sum(1 for count in words.values() if count >= min_count)
    return min(limit, BASE_PIECES + len(characters) + frequent)
