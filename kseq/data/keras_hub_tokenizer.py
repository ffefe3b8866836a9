"""kseq's tokenizer interface over a keras-hub tokenizer."""

import base64
import json
import os
import tempfile

import numpy as np
import tensorflow as tf

from kseq._atomic import write_bytes_atomic
from kseq._compat import call_recreating_lost_resource
from kseq.data.detokenize import output_ids_to_text_ids
from kseq.special_ids import EOS_ID, NUM_SPECIAL_IDS, UNK_ID

# How `id_to_piece` names kseq's reserved ids when the vocabulary has no
# tokens of its own for them (SentencePiece's names).
RESERVED_PIECES = ("<pad>", "<s>", "</s>", "<unk>")


def keras_hub_tokenizers():
    """Imports `keras_hub.tokenizers` on first use.

    keras-hub takes seconds to import, and kseq's other tokenizers do not need it.

    Returns:
        The `keras_hub.tokenizers` module.
    """
    import keras_hub

    return keras_hub.tokenizers


class KerasHubTokenizer(tf.Module):
    """Gives a keras-hub tokenizer kseq's interface and reserved ids.

    kseq's tokenizers return ragged int32 ids from `tokenize` whether called
    eagerly, in `tf.data` or in an exported graph, and ids 0-3 are PAD, BOS,
    EOS and UNK. keras-hub tokenizers run their Python path (returning
    lists) when called eagerly and number their own vocabularies; this
    wrapper always runs their TensorFlow path (a `tf.function` when called
    eagerly) and maps ids explicitly:

    - `special_tokens=None`: kseq's PAD, BOS, EOS, UNK take ids 0-3 and every
      vocabulary id moves up by 4, so any vocabulary fits (a BERT WordPiece
      or GPT-2 BPE file as it is).
    - `special_tokens=(pad, bos, eos, unk)`: the vocabulary's own tokens at
      ids 0, 1, 2, 3 serve as kseq's, and ids stay as they are.

    Either way the vocabulary's unknown token, and ids a tokenizer returns
    for tokens it lacks (keras-hub's BPE gives -1), become UNK; detokenizing
    writes UNK as that unknown token, or nothing where there is none, and
    bytes that are no UTF-8 (byte-level BPE from a model) as U+FFFD.
    Being a `tf.Module` that holds the keras-hub layer, it is tracked by
    `kseq.export`, so the SavedModel holds the vocabulary and serves with
    tensorflow and tensorflow_text alone (keras-hub's WordPiece and BPE are
    tensorflow_text ops and lookup tables). Load vocabulary files with
    `kseq.data.tokenizers.load_tokenizer`.

    Args:
        tokenizer: a `keras_hub.tokenizers.Tokenizer` with an integer
            `dtype`, no `sequence_length` and a vocabulary set, e.g.
            `WordPieceTokenizer`, `BytePairTokenizer`,
            `SentencePieceTokenizer`.
        special_tokens: None (default) to shift the vocabulary's ids by 4,
            or the vocabulary's 4 tokens for PAD, BOS, EOS and UNK, which
            must be its ids 0-3.
        unknown_token: the vocabulary's token for what it cannot spell, or
            None for the tokenizer's own: WordPiece's `oov_token`,
            SentencePiece's unknown piece; BPE has none.
        name: the `tf.Module` name.

    Raises:
        ValueError: a tokenizer kseq cannot wrap (see `check_keras_hub_tokenizer`),
            `special_tokens` that are not the vocabulary's ids 0-3, or an
            `unknown_token` missing from the vocabulary.

    Example:
    >>> import keras_hub
    >>> vocabulary = ["[PAD]", "[UNK]", "the", "cat", "s", "##s", "at"]
    >>> tokenizer = KerasHubTokenizer(keras_hub.tokenizers.WordPieceTokenizer(vocabulary))
    >>> ids = tokenizer.tokenize(["the cats", "the dog"])
    >>> ids.to_list()  # vocabulary ids + 4; "dog" is UNK (3)
    [[6, 7, 9], [6, 3]]
    >>> tokenizer.detokenize([[1, 6, 7, 9, 2, 0]]).numpy()
    array([b'the cats'], dtype=object)
    >>> tokenizer.vocab_size
    11
    """

    def __init__(self, tokenizer, special_tokens=None, unknown_token=None, name=None):
        super().__init__(name=name)
        check_keras_hub_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        token_ids = vocabulary_ids(tokenizer)
        self.special_tokens = check_special_tokens(special_tokens, token_ids)
        self.id_offset = 0 if special_tokens else NUM_SPECIAL_IDS
        self.unknown_token = default_unknown_token(tokenizer) if unknown_token is None else unknown_token
        if self.unknown_token is not None and self.unknown_token not in (token_ids or {}):
            raise ValueError(
                f"`unknown_token` {self.unknown_token!r} is not in the vocabulary of "
                f"{type(tokenizer).__name__}; name the vocabulary's token for unknown text."
            )
        self._unknown_id = token_ids[self.unknown_token] if self.unknown_token is not None else None
        size = max(token_ids.values()) + 1 if token_ids else tokenizer.vocabulary_size()
        self._vocab_size = size + self.id_offset
        # Unshifted ids with the unknown token at UNK_ID from a tokenizer that
        # never returns -1 need no mapping op (a SubwordTokenizer's case).
        hub = keras_hub_tokenizers()
        never_missing = isinstance(tokenizer, (hub.SentencePieceTokenizer, hub.WordPieceTokenizer))
        self._same_ids = self.id_offset == 0 and self._unknown_id == UNK_ID and never_missing
        self._valid_utf8 = isinstance(tokenizer, (hub.SentencePieceTokenizer, hub.WordPieceTokenizer))
        self._eager = _EagerCalls(self)

    @property
    def vocab_size(self):
        """Ids from 0 to `vocab_size - 1` (kseq's 4 reserved ids included)."""
        return self._vocab_size

    # Python-level ifs only: autograph (which tf.data's `map` applies) would
    # spend seconds converting keras-hub's code on a pipeline's first trace.
    @tf.autograph.experimental.do_not_convert
    def tokenize(self, strings):
        """Turns strings into kseq's ids (no BOS/EOS added).

        Args:
            strings: (B,) strings.

        Returns:
            (B, None) int32 ragged ids.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        if tf.executing_eagerly():
            return self._run(lambda: self._eager.tokenize(strings))
        return self._tokenize_in_graph(strings)

    @tf.autograph.experimental.do_not_convert
    def detokenize(self, ids):
        """Turns ids into strings, one per row.

        Each row stops at its first EOS; PAD and BOS are dropped; ids out of
        range count as UNK.

        Args:
            ids: (B, T) ids.

        Returns:
            (B,) strings.
        """
        ids = tf.convert_to_tensor(ids, tf.int32)
        if tf.executing_eagerly():
            return self._run(lambda: self._eager.detokenize(ids))
        return self._detokenize_in_graph(ids)

    def _tokenize_in_graph(self, strings):
        hub_ids = self.tokenizer.tokenize(strings)
        if self._same_ids and hub_ids.dtype == tf.int32:
            return hub_ids
        return tf.ragged.map_flat_values(self._to_kseq_ids, hub_ids)

    def _to_kseq_ids(self, hub_ids):
        hub_ids = tf.cast(hub_ids, tf.int32)
        unknown = hub_ids < 0  # keras-hub's BPE: a token missing from the vocabulary
        if self._unknown_id is not None:
            unknown = tf.logical_or(unknown, tf.equal(hub_ids, self._unknown_id))
        return tf.where(unknown, UNK_ID, hub_ids + self.id_offset)

    def _detokenize_in_graph(self, ids):
        ids, before_eos = output_ids_to_text_ids(ids, self.vocab_size)
        keep = tf.logical_and(before_eos, ids > EOS_ID)
        unknown_id = self._unknown_id
        if unknown_id is None and self.special_tokens:
            unknown_id = UNK_ID  # the vocabulary's own token at id 3
        if unknown_id is None:
            keep = tf.logical_and(keep, tf.not_equal(ids, UNK_ID))
            unknown_id = 0
        hub_ids = tf.where(tf.equal(ids, UNK_ID), unknown_id, ids - self.id_offset)
        text = self.tokenizer.detokenize(tf.ragged.boolean_mask(hub_ids, keep))
        if self._valid_utf8:
            return text
        # Byte-level BPE joins whatever bytes a model generates: invalid UTF-8
        # becomes U+FFFD (as SentencePiece's decoder does), never bad strings.
        return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")

    def _run(self, call):
        """`call()`, again after rebuilding the tokenizer's TensorFlow state
        if TensorFlow dropped it (kseq._compat.call_recreating_lost_resource:
        tensorflow_text's SentencePiece op loses its model on a reseed)."""
        return call_recreating_lost_resource(call, self._rebuild)

    def _rebuild(self):
        if isinstance(self.tokenizer, keras_hub_tokenizers().SentencePieceTokenizer):
            self.tokenizer.set_proto(self.tokenizer.proto)
        self._eager = _EagerCalls(self)

    def id_to_piece(self, ids):
        """Names ids by their tokens, for plot labels.

        Args:
            ids: ids, flattened to 1-D.

        Returns:
            A list of token strings; shifted reserved ids get SentencePiece's
            names ("<pad>", "<s>", "</s>", "<unk>").
        """
        pieces = []
        for kseq_id in np.asarray(ids).reshape(-1).tolist():
            hub_id = kseq_id - self.id_offset
            if hub_id < 0:
                pieces.append(RESERVED_PIECES[kseq_id])
            else:
                pieces.append(self.tokenizer.id_to_token(hub_id))
        return pieces

    def asset_files(self):
        """Gives what `save` writes, for an export's assets/ folder or a run's logdir (`load_tokenizer` reads it back).

        Returns:
            {"tokenizer.json": bytes}.
        """
        return {"tokenizer.json": self._saved_json()}

    def save(self, path):
        """Writes the tokenizer as one JSON file, atomically; `load` rebuilds it.

        The file holds kseq's id mapping, the keras-hub tokenizer's config and
        its vocabulary files.

        Args:
            path: the file to write.
        """
        write_bytes_atomic(path, self._saved_json())

    def _saved_json(self):
        import keras

        with tempfile.TemporaryDirectory() as folder:
            self.tokenizer.save_assets(folder)
            assets = {}
            for file_name in sorted(os.listdir(folder)):
                with open(os.path.join(folder, file_name), "rb") as f:
                    assets[file_name] = base64.b64encode(f.read()).decode("ascii")
        saved = {
            "type": "keras_hub",
            "special_tokens": list(self.special_tokens) if self.special_tokens else None,
            "unknown_token": self.unknown_token,
            "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
            "assets": assets,
        }
        return json.dumps(saved, indent=1, ensure_ascii=False).encode("utf-8")

    @classmethod
    def load(cls, path):
        """Rebuilds a tokenizer that `save` wrote to `path`.

        Args:
            path: the JSON file.

        Returns:
            A `KerasHubTokenizer`.

        Raises:
            ValueError: the file is not one `save` wrote.
        """
        import keras

        keras_hub_tokenizers()  # registers keras-hub's classes for deserializing
        with open(path, "rb") as f:
            try:
                saved = json.loads(f.read().decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                saved = None
        if not isinstance(saved, dict) or saved.get("type") != "keras_hub":
            raise ValueError(f"{path} is not a tokenizer saved by KerasHubTokenizer.save.")
        tokenizer = keras.saving.deserialize_keras_object(saved["tokenizer"])
        with tempfile.TemporaryDirectory() as folder:
            for file_name, content in saved["assets"].items():
                with open(os.path.join(folder, file_name), "wb") as f:
                    f.write(base64.b64decode(content))
            tokenizer.load_assets(folder)
        return cls(tokenizer, special_tokens=saved["special_tokens"], unknown_token=saved["unknown_token"])


class _EagerCalls:
    """`tokenize`/`detokenize` of a KerasHubTokenizer as `tf.function`s, for
    eager calls: in a function keras-hub runs its TensorFlow path and returns
    tensors. A plain object, not a `tf.Module`, so that SavedModels do not
    keep these functions.

    Why the keras-hub path is kept: it gives the same ids and text as the
    bare tensorflow_text op and is as fast on large batches; each eager call
    pays this `tf.function`'s call, but kseq calls eagerly only on whole data
    sets or a few prompts, and reaching around it to the bare op would need
    keras-hub's private attributes (benchmarks/RESULTS.md, "Tokenizer speed").
    """

    def __init__(self, owner):
        options = dict(autograph=False, reduce_retracing=True)
        strings = tf.TensorSpec([None], tf.string)
        self._tokenize_batch = tf.function(owner._tokenize_in_graph, input_signature=[strings], autograph=False)
        self._tokenize_any = tf.function(owner._tokenize_in_graph, **options)
        self.detokenize = tf.function(owner._detokenize_in_graph, **options)

    def tokenize(self, strings):
        if strings.shape.rank == 1:  # the usual batch: one trace for every size
            return self._tokenize_batch(strings)
        return self._tokenize_any(strings)


def check_keras_hub_tokenizer(tokenizer):
    """Checks that `tokenizer` is a keras-hub tokenizer that KerasHubTokenizer can wrap.

    Args:
        tokenizer: the object to check.

    Raises:
        ValueError: it is no `keras_hub.tokenizers.Tokenizer`, its ids are not
            integers, it pads to a `sequence_length`, adds BOS/EOS itself, or
            has no vocabulary yet.
    """
    hub = keras_hub_tokenizers()
    if not isinstance(tokenizer, hub.Tokenizer):
        raise ValueError(
            f"`tokenizer` must be a keras_hub.tokenizers.Tokenizer; got {type(tokenizer).__name__}."
        )
    if not tf.as_dtype(tokenizer.compute_dtype).is_integer:
        raise ValueError(f"`tokenizer` must output integer ids; its dtype is {tokenizer.compute_dtype!r}.")
    if getattr(tokenizer, "sequence_length", None):
        raise ValueError(
            "`tokenizer` must return ragged ids (sequence_length=None): kseq pads batches itself."
        )
    if getattr(tokenizer, "add_bos", False) or getattr(tokenizer, "add_eos", False):
        raise ValueError("`tokenizer` must not add BOS/EOS itself (add_bos=add_eos=False): kseq adds them.")
    try:
        tokenizer.vocabulary_size()
    except ValueError as error:
        raise ValueError(f"`tokenizer` has no vocabulary yet: {error}") from None


def vocabulary_ids(tokenizer):
    """Maps a keras-hub tokenizer's tokens to their ids (the first id of a token listed twice).

    Args:
        tokenizer: a keras-hub tokenizer.

    Returns:
        {token: id}, or None for tokenizers without a vocabulary list, such as
        UnicodeCodepointTokenizer.
    """
    vocabulary = getattr(tokenizer, "vocabulary", None)
    if isinstance(vocabulary, dict):  # BytePairTokenizer: token -> id
        return {token: int(i) for token, i in vocabulary.items()}
    try:
        tokens = tokenizer.get_vocabulary()
    except NotImplementedError:
        return None
    ids = {}
    for i, token in enumerate(tokens):
        ids.setdefault(token, i)
    return ids


def check_special_tokens(special_tokens, token_ids):
    """Checks that the 4 special tokens are the vocabulary's ids 0-3.

    Args:
        special_tokens: the tokens for PAD, BOS, EOS and UNK, or None.
        token_ids: {token: id} of the vocabulary (`vocabulary_ids`), or None.

    Returns:
        None, or the 4 tokens as a tuple.

    Raises:
        ValueError: not 4 tokens, or they are not ids 0, 1, 2, 3.
    """
    if special_tokens is None:
        return None
    special_tokens = tuple(special_tokens)
    if len(special_tokens) != NUM_SPECIAL_IDS:
        raise ValueError(
            f"`special_tokens` must name 4 tokens (PAD, BOS, EOS, UNK); got {special_tokens!r}."
        )
    found = tuple((token_ids or {}).get(token) for token in special_tokens)
    if found != tuple(range(NUM_SPECIAL_IDS)):
        raise ValueError(
            f"`special_tokens` {special_tokens!r} must be the vocabulary's ids 0, 1, 2, 3 "
            f"(kseq's PAD, BOS, EOS, UNK); they are {found} (None: missing). Pass "
            "special_tokens=None to shift the vocabulary's ids by 4 instead."
        )
    return special_tokens


def default_unknown_token(tokenizer):
    """Gives the tokenizer's own token for unknown text: WordPiece's `oov_token`, SentencePiece's unknown piece.

    Args:
        tokenizer: a keras-hub tokenizer.

    Returns:
        The token, or None for other tokenizers.
    """
    hub = keras_hub_tokenizers()
    if isinstance(tokenizer, hub.WordPieceTokenizer):
        return tokenizer.oov_token
    if isinstance(tokenizer, hub.SentencePieceTokenizer):
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
        return processor.id_to_piece(processor.unk_id())
    return None
