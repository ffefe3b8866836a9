"""A Marian checkpoint (OPUS-MT's `Helsinki-NLP/opus-mt-SRC-TGT`, in the Hugging
Face layout) as a kseq `TransformerSeq2Seq` and its two tokenizers."""

import dataclasses
import json
import os

from kseq.data.marian_tokenizer import MarianTokenizer
from kseq.errors import UsageError
from kseq.pretrained.folder import checkpoint_folder
from kseq.pretrained.marian_config import MarianConfig, read_marian_config
from kseq.pretrained.marian_weights import load_marian_weights
from kseq.pretrained.weights import read_weights, weight_files


@dataclasses.dataclass
class MarianCheckpoint:
    """A loaded Marian checkpoint.

    Args:
        model: the built `TransformerSeq2Seq`, its weights the checkpoint's.
        source_tokenizer, target_tokenizer: its `MarianTokenizer`s.
        folder: where its files are.
        config: what kseq read of its config.json.
    """

    model: object
    source_tokenizer: MarianTokenizer
    target_tokenizer: MarianTokenizer
    folder: str
    config: MarianConfig


def load_marian(name_or_folder, dtype=None, dropout=None, compiled_blocks=False):
    """Loads a Marian checkpoint into kseq's Transformer.

    Every file is checked before the model is built: config.json (another
    architecture is refused, naming the field), the weights (model.safetensors,
    or pytorch_model.bin where PyTorch is installed), source.spm, target.spm,
    vocab.json (target_vocab.json for separate vocabularies) and the
    vocabularies' sizes against config.json.

    Args:
        name_or_folder: a checkpoint folder, or a Hub name (the `hub` extra).
        dtype: the model's dtype policy. Default None: keras' global one.
        dropout: the dropout rate to train with. Default None: config.json's.
        compiled_blocks: `TransformerSeq2Seq`'s `compiled_blocks` (`kseq-train
            --jit-compile blocks`). Default False.

    Returns:
        A `MarianCheckpoint`.

    Raises:
        UsageError: a missing or bad file, named (docs/errors.md).

    Example:
    >>> import os
    >>> folder = os.path.join("tests", "fixtures", "marian", "joint_swish")
    >>> loaded = load_marian(folder)
    >>> ids = loaded.source_tokenizer.tokenize(["the cat"]).to_tensor()
    >>> loaded.source_tokenizer.detokenize(ids).numpy()
    array([b'the cat'], dtype=object)
    """
    from kseq.models.transformer_seq2seq import TransformerSeq2Seq

    folder = checkpoint_folder(name_or_folder)
    config = checkpoint_config(folder)
    _, paths = weight_files(folder)
    source, target = marian_tokenizers(folder)
    for side, tokenizer, size, field in (("source", source, config.source_size, "vocab_size"),
                                         ("target", target, config.target_size, "decoder_vocab_size")):
        if len(tokenizer.vocabulary) != size:
            raise UsageError(f"{folder}: the {side} vocabulary has {len(tokenizer.vocabulary)} pieces; "
                             f"config.json's {field} (its embedding's rows) is {size}")
        if tokenizer.vocabulary[tokenizer.special_tokens[2]] != config.pad_id:
            raise UsageError(f"{folder}: the {side} vocabulary's {tokenizer.special_tokens[2]!r} is id "
                             f"{tokenizer.vocabulary[tokenizer.special_tokens[2]]}; config.json's pad_token_id "
                             f"is {config.pad_id}")
    arguments = dict(config.model_arguments, compiled_blocks=compiled_blocks,
                     **({} if dropout is None else {"dropout": dropout}))
    model = TransformerSeq2Seq(source.vocab_size, target.vocab_size, dtype=dtype, **arguments)
    model.build()
    load_marian_weights(model, read_weights(folder), source.order, target.order, paths[0])
    return MarianCheckpoint(model, source, target, folder, config)


def checkpoint_config(folder):
    """Reads and checks a checkpoint folder's config.json.

    Args:
        folder: the checkpoint folder.

    Returns:
        A `MarianConfig`.

    Raises:
        UsageError: no config.json, not JSON, or another architecture.
    """
    path = os.path.join(folder, "config.json")
    return read_marian_config(_json(path, "config.json"), path)


def marian_tokenizers(name_or_folder):
    """A Marian checkpoint's tokenizers: (source, target) `MarianTokenizer`s.

    Read from source.spm, target.spm, vocab.json (and target_vocab.json with
    `separate_vocabs`), and tokenizer_config.json where present (its special
    tokens, `separate_vocabs`, `clean_up_tokenization_spaces`).

    Args:
        name_or_folder: a checkpoint folder, or a Hub name (the `hub` extra).

    Returns:
        (source tokenizer, target tokenizer).

    Raises:
        UsageError: a missing or bad file, named.
    """
    folder = checkpoint_folder(name_or_folder)
    settings_path = os.path.join(folder, "tokenizer_config.json")
    settings = _json(settings_path, "tokenizer_config.json") if os.path.isfile(settings_path) else {}
    specials = [_token(settings.get(name, default)) for name, default in
                (("eos_token", "</s>"), ("unk_token", "<unk>"), ("pad_token", "<pad>"))]
    specials += [_token(token) for token in settings.get("additional_special_tokens") or []
                 if _token(token) not in specials]
    protos = [_bytes(os.path.join(folder, name)) for name in ("source.spm", "target.spm")]
    separate = bool(settings.get("separate_vocabs", False))
    names = ("vocab.json", settings.get("target_vocab_file") or "target_vocab.json") if separate else \
        ("vocab.json", "vocab.json")
    vocabularies = [_json(os.path.join(folder, os.path.basename(name)), os.path.basename(name)) for name in names]
    # transformers decodes a joint vocabulary's ids with the source model, separate ones' with the target's.
    decoding = protos[1] if separate else protos[0]
    clean_up = bool(settings.get("clean_up_tokenization_spaces", False))
    made = []
    for side, proto, vocabulary, name in zip(("source", "target"), protos, vocabularies, names):
        try:
            made.append(MarianTokenizer(proto, vocabulary, side, specials, decoding, clean_up))
        except (ValueError, RuntimeError) as error:
            raise UsageError(f"{os.path.join(folder, os.path.basename(name))}: {error}") from None
    return tuple(made)


def _token(value):
    """A special token as tokenizer_config.json spells it: a string or {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else str(value)


def _bytes(path):
    try:
        with open(path, "rb") as f:
            content = f.read()
    except OSError as error:
        raise UsageError(f"{path}: {error.strerror or error}; a Marian checkpoint holds source.spm and "
                         "target.spm") from None
    import sentencepiece

    try:
        sentencepiece.SentencePieceProcessor(model_proto=content)
    except RuntimeError:
        raise UsageError(f"{path} is no SentencePiece model (truncated?)") from None
    return content


def _json(path, name):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except OSError as error:
        raise UsageError(f"{path}: {error.strerror or error}; a Marian checkpoint folder holds {name}") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise UsageError(f"{path} is not UTF-8 JSON ({error})") from None
