"""SentencePiece subword tokenizer that runs in the graph and exports."""

import collections
import io
import re

import sentencepiece

from kseq._atomic import write_bytes_atomic
from kseq.data.keras_hub_tokenizer import KerasHubTokenizer, keras_hub_tokenizers
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from kseq._validation import check_choice, check_positive_int


class SubwordTokenizer(KerasHubTokenizer):
    """A SentencePiece model applied with keras-hub's SentencePieceTokenizer.

    Ids 0-3 are PAD, BOS, EOS and UNK, as everywhere in kseq. Training uses
    identity normalization and byte fallback (characters outside the
    vocabulary become their UTF-8 bytes, never UNK), so for text that is
    already normalized (NFC, single spaces, as kseq.data's loaders produce)
    detokenize(tokenize(x)) == x. keras-hub's layer runs tensorflow_text's
    SentencePiece op, so the tokenizer runs inside `tf.data` and inside an
    exported SavedModel (which then needs only tensorflow and
    tensorflow_text); `KerasHubTokenizer` gives it kseq's interface. One
    tokenizer can serve both languages (a joint vocabulary, for shared
    embeddings).

    Args:
        proto: the serialized SentencePiece model (bytes).
        name: the `tf.Module` name. Default None.

    Raises:
        ValueError: `proto` is empty or no SentencePiece model, or its
            pad/bos/eos/unk ids are not 0/1/2/3.

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
        if not isinstance(proto, bytes) or not proto:
            raise ValueError("`proto` must be the non-empty bytes of a SentencePiece model.")
        specials = special_ids(proto)
        if specials != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(
                "The SentencePiece model must use pad/bos/eos/unk ids 0/1/2/3 as kseq "
                f"does; it uses {specials}. Train it with SubwordTokenizer.train, or wrap it "
                "with kseq.data.tokenizers.load_tokenizer, which shifts its ids."
            )
        layer = keras_hub_tokenizers().SentencePieceTokenizer(proto=proto, dtype="int32")
        # The model's own pad/bos/eos/unk pieces are kseq's ids 0-3: no shift.
        super().__init__(layer, special_tokens=layer.get_vocabulary()[:4], name=name)
        self.proto = proto

    # DESIGN note: training stays with sentencepiece's trainer, not keras-hub's
    # `compute_sentence_piece_proto` (keras-hub 0.32.0), which fixes options
    # kseq cannot use: it numbers pad/unk/bos/eos 0/1/2/3 (kseq: UNK is 3,
    # BOS 1, EOS 2), normalizes with "nmt_nfkc" (NFKC and whitespace folding:
    # detokenize(tokenize(x)) != x for e.g. "ﬁ" or double spaces) and has no
    # byte fallback (unseen characters become UNK), no character coverage,
    # no soft vocabulary limit (a small text fails instead of giving fewer
    # pieces) and no sentence sampling (it reads every sentence); it also
    # takes only a tf.data.Dataset or file names. The options below are
    # passed to the same sentencepiece trainer keras-hub calls.
    @classmethod
    def train(cls, texts, vocab_size=8000, model_type="unigram", seed_sentences=200000):
        """Trains a SentencePiece model on `texts` (an iterable of strings).

        Args:
            texts: training sentences, already normalized; empty ones are skipped.
            vocab_size: pieces in the vocabulary, special ids and the 256
                byte pieces included; a small text may give fewer (see
                `vocab_size` afterwards). Default 8000.
            model_type: "unigram" or "bpe". Default "unigram".
            seed_sentences: the most sentences SentencePiece reads. Default 200,000.

        Returns:
            A `SubwordTokenizer`.

        Raises:
            ValueError: a bad `vocab_size` or `model_type`, no non-empty text, or
                SentencePiece's training failed (its message).
            VocabularyTooSmall: `vocab_size` is under the base pieces and
                one piece for each character of `texts` (a ValueError).
        """
        check_positive_int("vocab_size", vocab_size)
        check_choice("model_type", model_type, ("unigram", "bpe"))
        texts = [text for text in texts if text]
        if not texts:
            raise ValueError("`texts` must hold at least one non-empty string.")
        if vocab_size <= BASE_PIECES:  # SentencePiece's own message names its internals
            raise VocabularyTooSmall(vocab_size, BASE_PIECES + 1)
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
            needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error))
            if needed:
                raise VocabularyTooSmall(vocab_size, int(needed.group(1))) from None
            raise ValueError(f"SentencePiece training failed: {error}") from None
        return cls(proto.getvalue())

    def save(self, path):
        """Writes the SentencePiece model file, atomically (temp file + rename).

        Args:
            path: the file to write.
        """
        write_bytes_atomic(path, self.proto)

    def asset_files(self):
        """Gives what `save` writes, for an export's assets/ folder or a run's logdir.

        Returns:
            {"spm.model": the model's bytes}.
        """
        return {"spm.model": self.proto}

    @classmethod
    def load(cls, path):
        """Reads the tokenizer whose SentencePiece model file `save` wrote.

        Args:
            path: the model file.

        Returns:
            A `SubwordTokenizer`.

        Raises:
            ValueError: the file is no SentencePiece model with kseq's special ids.
        """
        with open(path, "rb") as f:
            return cls(f.read())


def special_ids(proto):
    """Reads the (pad, bos, eos, unk) ids of a serialized SentencePiece model.

    Args:
        proto: the model's bytes.

    Returns:
        A tuple of 4 ints.

    Raises:
        ValueError: `proto` is not a SentencePiece model.
    """
    try:
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as error:
        raise ValueError(f"`proto` is not a SentencePiece model: {error}") from None
    return (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())


# Pieces every SubwordTokenizer holds whatever its text: PAD, BOS, EOS, UNK
# and the 256 byte-fallback pieces.
BASE_PIECES = 4 + 256


class VocabularyTooSmall(ValueError):
    """A vocabulary size under what the texts need: the base pieces and one
    piece for each of their characters (`character_coverage=1.0`).

    Args:
        vocab_size: the size asked for.
        needed: the smallest size that works for the texts.

    Attributes:
        vocab_size, needed: as given.
    """

    def __init__(self, vocab_size, needed):
        self.vocab_size, self.needed = vocab_size, needed
        characters = needed - BASE_PIECES
        super().__init__(f"`vocab_size` {vocab_size} is too small for these texts: expected at least {needed} "
                         f"(the {BASE_PIECES} base pieces, special ids and bytes, and one for each of "
                         f"{'their' if characters > 1 else 'at least'} {characters} character"
                         f"{'s' if characters > 1 else ''}).")


def vocab_size_for(texts, limit, min_count=10):
    """Chooses a vocabulary size that fits `texts`, at most `limit`.

    The base pieces, one piece per distinct character, and one per word seen
    at least `min_count` times: words that often are worth a piece of their
    own; rarer strings (numbers, codes, dates, names) are better spelled
    out from pieces the model sees often. On a large, varied corpus the
    count passes any usual `limit`; on a small or repetitive one (a user's
    dates or codes) it stays small, so that SentencePiece does not fill the
    vocabulary with whole rare strings, each seen a few times.

    Args:
        texts: an iterable of strings; words are split on whitespace.
        limit: the largest size to give.
        min_count: how often a word must occur to count. Default 10.

    Returns:
        The size, an int.

    Raises:
        ValueError: `limit` is not an int >= 1.

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
