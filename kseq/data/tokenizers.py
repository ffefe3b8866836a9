"""Tokenizers from keras-hub objects and from vocabulary files.

kseq's tokenizers share one interface, which tf.data pipelines, models'
vocabulary sizes and `kseq.export` use: `tokenize(strings)` -> ragged int32
ids, `detokenize(ids)` -> strings (stopping at EOS), `vocab_size`, `save`
and `load`; ids 0-3 are PAD, BOS, EOS, UNK. SubwordTokenizer and
KerasHubTokenizer add `id_to_piece` and `asset_files()` (the files that
rebuild them, for a logdir or an export's assets/).
`KerasHubTokenizer(hub)` gives a keras-hub tokenizer that interface;
`load_tokenizer` reads what a user has on disk (what `--tokenizer PATH`
takes in the tasks).

Example:
>>> import keras_hub
>>> hub = keras_hub.tokenizers.WordPieceTokenizer(["[UNK]", "hello", "world", "##s"])
>>> tokenizer = KerasHubTokenizer(hub)
>>> tokenizer.tokenize(["hello worlds"]).to_list()
[[5, 6, 7]]
"""

import json
import os
import warnings

import sentencepiece

from kseq.data.keras_hub_tokenizer import KerasHubTokenizer, keras_hub_tokenizers
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def from_keras_hub(tokenizer, special_tokens=None, unknown_token=None):
    """Deprecated: `KerasHubTokenizer(tokenizer, special_tokens, unknown_token)`, which this calls.

    Returns:
        The `KerasHubTokenizer`.
    """
    warnings.warn("`from_keras_hub` is deprecated: use `kseq.data.KerasHubTokenizer(tokenizer, special_tokens, "
                  "unknown_token)`.", DeprecationWarning, stacklevel=2)
    return KerasHubTokenizer(tokenizer, special_tokens=special_tokens, unknown_token=unknown_token)


def word_piece_tokenizer(vocabulary_file, unknown_token="[UNK]", special_tokens=None, **options):
    """A WordPiece vocabulary file (one token per line, as BERT's
    vocab.txt) as a kseq tokenizer, through keras-hub's WordPieceTokenizer.

    Args:
        vocabulary_file: path of the vocabulary, UTF-8, one token a line.
        unknown_token: its token for unknown words (keras-hub's `oov_token`).
        special_tokens: see `KerasHubTokenizer`.
        **options: WordPieceTokenizer's own options, e.g. `lowercase=True`,
            `strip_accents=True` (keras-hub's defaults: neither).

    Example:
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(path, "w").write("[PAD]\\n[UNK]\\nhello\\n")
    >>> word_piece_tokenizer(path).vocab_size  # 3 tokens after kseq's 4 reserved ids
    7
    """
    tokens = word_piece_tokens(vocabulary_file, unknown_token)
    hub = keras_hub_tokenizers().WordPieceTokenizer(vocabulary=tokens, oov_token=unknown_token, **options)
    return KerasHubTokenizer(hub, special_tokens=special_tokens, unknown_token=unknown_token)


def word_piece_tokens(vocabulary_file, unknown_token="[UNK]"):
    """Reads a WordPiece vocabulary file and checks that it holds the unknown token.

    Args:
        vocabulary_file: path of the vocabulary, UTF-8, one token a line.
        unknown_token: its token for unknown words. Default "[UNK]".

    Returns:
        The tokens, a list of strings (line i is id i).

    Raises:
        ValueError: the file cannot be read, is not UTF-8, or lacks `unknown_token`.
    """
    tokens = read_lines(vocabulary_file, "vocabulary_file")
    if unknown_token not in tokens:
        raise ValueError(
            f"`vocabulary_file` {vocabulary_file} has no {unknown_token!r} token, which WordPiece "
            "needs for unknown words; add it to the file or pass `unknown_token` (the "
            "vocabulary's own token for them)."
        )
    return tokens


def byte_pair_tokenizer(vocabulary_file, merges_file, special_tokens=None, unknown_token=None, **options):
    """A byte-level BPE vocabulary (GPT-2's vocab.json, {token: id}) and its
    merges file (one "a b" rule a line) as a kseq tokenizer, through
    keras-hub's BytePairTokenizer. Byte-level BPE spells any text from its
    256 byte tokens, so detokenize(tokenize(x)) == x when the vocabulary
    holds them all. keras-hub's BPE costs more than SentencePiece: seconds
    to trace its graph (once per function or pipeline), about 8x the time
    per sentence (20k short sentences: 2.0 s vs 0.25 s on 2 CPU cores), and
    a cache of every word it has split (a mutable table, kept in an export,
    that grows with each new word served).

    Args:
        vocabulary_file: path of the JSON vocabulary.
        merges_file: path of the merge rules (a "#version" line is skipped).
        special_tokens, unknown_token: see `KerasHubTokenizer`.
        **options: BytePairTokenizer's own options, e.g. `add_prefix_space`.

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> vocabulary = {"a": 0, "b": 1, "ab": 2}
    >>> _ = open(os.path.join(folder, "vocab.json"), "w").write(json.dumps(vocabulary))
    >>> _ = open(os.path.join(folder, "merges.txt"), "w").write("#version: 0.2\\na b\\n")
    >>> tokenizer = byte_pair_tokenizer(os.path.join(folder, "vocab.json"),
    ...                                 os.path.join(folder, "merges.txt"))
    >>> tokenizer.vocab_size  # 3 tokens after kseq's 4 reserved ids
    7
    """
    vocabulary, merges = byte_pair_rules(vocabulary_file, merges_file)
    hub = keras_hub_tokenizers().BytePairTokenizer(vocabulary=vocabulary, merges=merges, **options)
    return KerasHubTokenizer(hub, special_tokens=special_tokens, unknown_token=unknown_token)


def byte_pair_rules(vocabulary_file, merges_file):
    """Reads a BPE vocabulary and its merges, checking that each merge joins two of its tokens.

    Args:
        vocabulary_file: path of the JSON vocabulary, {token: id}.
        merges_file: path of the merge rules (a "#version" line is skipped).

    Returns:
        (vocabulary dict, merges: a list of "a b" strings).

    Raises:
        ValueError: a file cannot be read, the vocabulary is no JSON object,
            or a merge is not two of its tokens.
    """
    vocabulary = read_json(vocabulary_file, "vocabulary_file")
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError(f"`vocabulary_file` {vocabulary_file} must hold a JSON object {{token: id}}.")
    merges = [line for line in read_lines(merges_file, "merges_file")
              if line and not line.startswith("#version")]
    missing = [rule for rule in merges if len(rule.split(" ")) != 2
               or any(token not in vocabulary for token in rule.split(" "))]
    if missing:
        raise ValueError(
            f"`merges_file` {merges_file} has {len(missing)} rule(s) that are not two tokens "
            f"of `vocabulary_file` {vocabulary_file}, e.g. {missing[0]!r}."
        )
    return vocabulary, merges


# File names of a BPE vocabulary in a folder: GPT-2's, then keras-hub's assets.
BPE_FILES = (("vocab.json", "merges.txt"), ("vocabulary.json", "merges.txt"))


def load_tokenizer(path: str):
    """A kseq tokenizer from what is on disk, told apart by content:

    - a file `KerasHubTokenizer.save` wrote (JSON), `CharacterTokenizer.save`
      or `MarianTokenizer.save` (one side of a pretrained Marian translator);
    - a SentencePiece model: a `SubwordTokenizer` if it numbers pad/bos/eos/unk
      0-3 as kseq does, else keras-hub's SentencePieceTokenizer with ids shifted;
    - a WordPiece vocabulary, one token a line, with "[UNK]";
    - a BPE pair: "vocab.json,merges.txt", or a folder holding vocab.json (or
      vocabulary.json) and merges.txt.

    For other options (WordPiece's `lowercase`, other special tokens) build
    one with `word_piece_tokenizer`/`byte_pair_tokenizer`/`KerasHubTokenizer`,
    `save` it and pass that file.

    Args:
        path: a file, a folder, or two files joined by a comma.

    Raises:
        ValueError: a missing path, or one that holds none of the above.
    """
    return _tokenizer_maker(path)()


def check_tokenizer(path: str):
    """Checks that `path` holds a tokenizer `load_tokenizer` reads, without making it.

    The files are read and checked as `load_tokenizer` reads them; no
    keras-hub layer is made and no TensorFlow op runs, so the tasks check
    `--tokenizer PATH` with their other options, before a run starts.

    Args:
        path: a file, a folder, or two files joined by a comma.

    Raises:
        ValueError: as `load_tokenizer`.
    """
    _tokenizer_maker(path)


def _tokenizer_maker(path):
    """Reads and checks what `path` holds (told apart by content, as `load_tokenizer` says).

    Args:
        path: a file, a folder, or two files joined by a comma.

    Returns:
        A function of no arguments making the tokenizer.

    Raises:
        ValueError: as `load_tokenizer`.
    """
    if "," in path and not os.path.exists(path):
        vocabulary_file, merges_file = path.split(",", 1)
        byte_pair_rules(vocabulary_file, merges_file)
        return lambda: byte_pair_tokenizer(vocabulary_file, merges_file)
    if os.path.isdir(path):
        for vocabulary_name, merges_name in BPE_FILES:
            vocabulary_file = os.path.join(path, vocabulary_name)
            if os.path.isfile(vocabulary_file):
                byte_pair_rules(vocabulary_file, os.path.join(path, merges_name))
                return lambda: byte_pair_tokenizer(vocabulary_file, os.path.join(path, merges_name))
        raise ValueError(f"tokenizer folder {path} holds no vocab.json and merges.txt (a BPE vocabulary).")
    content = read_bytes(path, "path")
    saved = parse_json(content)
    if isinstance(saved, dict) and saved.get("type") == "keras_hub":
        return lambda: KerasHubTokenizer.load(path)
    if isinstance(saved, dict) and saved.get("type") == "marian":
        from kseq.data.marian_tokenizer import MarianTokenizer

        return lambda: MarianTokenizer.from_saved(saved)
    if isinstance(saved, dict) and saved.get("type") == "character":
        from kseq.data.character_tokenizer import CharacterTokenizer

        return lambda: CharacterTokenizer.load(path)
    if saved is not None:
        raise ValueError(
            f"{path} is JSON but no saved kseq tokenizer; a BPE vocabulary needs its merges: "
            f"pass \"{path},merges.txt\"."
        )
    if is_sentence_piece(content):
        return lambda: sentence_piece_tokenizer(content)
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(
            f"`path` {path} is no tokenizer kseq reads: expected a saved kseq tokenizer, a SentencePiece "
            "model or a UTF-8 vocabulary."
        ) from None
    word_piece_tokens(path)
    return lambda: word_piece_tokenizer(path)


def tokenizer_files(tokenizer):
    """Gives the files that rebuild `tokenizer` with `load_tokenizer`.

    They go to a run's folder and an export's assets/ folder.

    Args:
        tokenizer: a kseq tokenizer.

    Returns:
        {file name: bytes}: spm.model for a SubwordTokenizer, tokenizer.json for
        keras-hub's; {} for a tokenizer that needs no file (a `CharacterTokenizer`
        is rebuilt from its alphabet).
    """
    if hasattr(tokenizer, "asset_files"):
        return tokenizer.asset_files()
    return {}


def sentence_piece_tokenizer(proto):
    """Wraps a SentencePiece model as a kseq tokenizer.

    Args:
        proto: the model's bytes.

    Returns:
        A SubwordTokenizer if the model numbers pad/bos/eos/unk as kseq does,
        else keras-hub's SentencePieceTokenizer behind shifted ids (`KerasHubTokenizer`).

    Raises:
        ValueError: `proto` is not a SentencePiece model.
    """
    from kseq.data.subword_tokenizer import SubwordTokenizer, special_ids

    if special_ids(proto) == (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
        return SubwordTokenizer(proto)
    return KerasHubTokenizer(keras_hub_tokenizers().SentencePieceTokenizer(proto=proto, dtype="int32"))


def is_sentence_piece(content):
    """Tells whether `content` is a SentencePiece model.

    Args:
        content: a file's bytes.

    Returns:
        True if sentencepiece loads it.
    """
    try:
        sentencepiece.SentencePieceProcessor(model_proto=content)
    except RuntimeError:
        return False
    return True


def parse_json(content):
    """Reads bytes as UTF-8 JSON.

    Args:
        content: a file's bytes.

    Returns:
        The JSON value, or None if they are not UTF-8 JSON.
    """
    try:
        return json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def read_bytes(path, argument):
    """Reads a file's bytes.

    Args:
        path: the file.
        argument: the argument that named it, for the error message.

    Returns:
        The bytes.

    Raises:
        ValueError: the file is missing or unreadable (naming `argument`).
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise ValueError(f"`{argument}` {path}: {error.strerror or error}") from None


def read_lines(path, argument):
    """Reads a file's lines as keras-hub reads a vocabulary file: line i is id i.

    Trailing whitespace is stripped and empty lines are kept; a final newline
    starts no extra line.

    Args:
        path: the file.
        argument: the argument that named it, for the error message.

    Returns:
        A list of strings.

    Raises:
        ValueError: the file is missing, unreadable or not UTF-8 (naming `argument`).
    """
    try:
        text = read_bytes(path, argument).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"`{argument}` {path} is not UTF-8 text ({error}).") from None
    lines = [line.rstrip() for line in text.split("\n")]
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_json(path, argument):
    """Reads a UTF-8 JSON file.

    Args:
        path: the file.
        argument: the argument that named it, for the error message.

    Returns:
        The JSON value.

    Raises:
        ValueError: the file is missing, unreadable or not UTF-8 JSON (naming `argument`).
    """
    value = parse_json(read_bytes(path, argument))
    if value is None:
        raise ValueError(f"`{argument}` {path} is not UTF-8 JSON.")
    return value
