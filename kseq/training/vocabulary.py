"""A run's tokenizer: the one a resumed run saved, `--init-from`'s,
`--tokenizer PATH`'s, or a SentencePiece vocabulary trained on the training
texts (and kept beside the data's scan, where the next run on the same data
finds it). Its files are written to the run's folder, where a resumed run
and `--init-from` read them back."""

import os
import time

from kseq._atomic import write_bytes_atomic
from kseq.data.tokenizers import load_tokenizer, tokenizer_files
from kseq.errors import UsageError
from kseq.training.config.warm_start import init_tokenizer

SAVED_NAMES = ("spm.model", "tokenizer.json")


def run_tokenizer(texts, folder, *, resuming=False, path=None, init_from=None, vocab_size="auto",
                  max_vocab_size=None, cache=None):
    """The run's tokenizer, its files written to `folder`.

    Args:
        texts: the training texts a vocabulary is trained on.
        folder: the run's folder (its logdir, or a worker's).
        resuming: reuse the tokenizer a run saved in `folder`.
        path: `--tokenizer`: a saved kseq tokenizer, a SentencePiece model,
            a WordPiece vocab.txt or a BPE "vocab.json,merges.txt" pair.
        init_from: `--init-from`: a finished run whose tokenizer is taken.
        vocab_size: SentencePiece pieces, or "auto": sized to `texts`
            (`kseq.data.subword_tokenizer.vocab_size_for`).
        max_vocab_size: the most pieces "auto" may choose.
        cache: a folder of the data's own where a vocabulary trained on
            `texts` is kept, and found by the next run on the same data.

    Returns:
        The tokenizer.
    """
    from kseq.data.subword_tokenizer import SubwordTokenizer, vocab_size_for

    start = time.time()
    saved = [os.path.join(folder, name) for name in SAVED_NAMES if os.path.exists(os.path.join(folder, name))]
    own = not path and not init_from
    if resuming and saved:
        tokenizer = load_tokenizer(saved[0])
    elif not own:
        tokenizer = given_tokenizer(path, init_from)
        write_tokenizer_files(tokenizer, folder)
    else:
        size = vocab_size_for(texts, max_vocab_size) if vocab_size == "auto" else vocab_size
        kept = os.path.join(cache, f"spm-{size}.model") if cache else None
        if kept and os.path.isfile(kept):
            tokenizer = SubwordTokenizer.load(kept)
            print(f"SentencePiece vocabulary: {tokenizer.vocab_size} pieces, trained on this data before ({kept})")
        else:
            # A size "auto" chose is cut to --max-vocab-size: that is the option to change.
            option = "--vocab-size" if vocab_size != "auto" else "--max-vocab-size"
            tokenizer = trained_tokenizer(texts, size, option)
            if kept:
                tokenizer.save(kept)
        write_tokenizer_files(tokenizer, folder)
    most = f", at most {max_vocab_size}" if max_vocab_size else ""
    print(f"vocabulary: {tokenizer.vocab_size} ids ({time.time() - start:.0f} s; --vocab-size {vocab_size}{most})")
    return tokenizer


def given_tokenizer(path=None, init_from=None):
    """Loads the tokenizer the user gave: `--init-from`'s, else `--tokenizer PATH`'s.

    Args:
        path: `--tokenizer`'s value; None (default) for none.
        init_from: `--init-from`'s run folder; None (default) for none.

    Returns:
        The tokenizer.

    Raises:
        UsageError: the path holds no tokenizer; the message names it.
    """
    if init_from:
        tokenizer = init_tokenizer(init_from)
        print(f"tokenizer: --init-from {init_from}'s, {tokenizer.vocab_size} ids")
        return tokenizer
    try:
        tokenizer = load_tokenizer(path)
    except ValueError as error:
        raise UsageError(f"--tokenizer {path}: {error}") from None
    print(f"tokenizer: {path}, {type(tokenizer).__name__} of {tokenizer.vocab_size} ids (--vocab-size unused)")
    return tokenizer


def trained_tokenizer(texts, vocab_size, option="--vocab-size"):
    """Trains a SentencePiece vocabulary of `vocab_size` pieces on `texts`.

    Args:
        texts: the training texts.
        vocab_size: the pieces wanted.
        option: the option that set the size, for the message. Default "--vocab-size".

    Returns:
        A `SubwordTokenizer`.

    Raises:
        UsageError: the texts cannot give that size; the message names the
            option and the smallest size that works.
    """
    from kseq.data.subword_tokenizer import BASE_PIECES, SubwordTokenizer, VocabularyTooSmall

    try:
        tokenizer = SubwordTokenizer.train(texts, vocab_size)
    except VocabularyTooSmall as error:
        raise UsageError(f"{option} {vocab_size}: too small for the training data: expected at least {error.needed} "
                         f"({BASE_PIECES} base pieces, the special ids and bytes, and one for each of the data's "
                         f"{error.needed - BASE_PIECES} characters)") from None
    except ValueError as error:
        raise UsageError(f"{option} {vocab_size}: {error}") from None
    print(f"SentencePiece vocabulary: {tokenizer.vocab_size} pieces")
    return tokenizer


def write_tokenizer_files(tokenizer, folder):
    """Writes `tokenizer`'s files (`tokenizer_files`) into `folder`, each atomically.

    Args:
        tokenizer: a kseq tokenizer.
        folder: an existing folder.
    """
    for name, content in tokenizer_files(tokenizer).items():
        write_bytes_atomic(os.path.join(folder, name), content)
