"""English->French user-interface messages: a second translation domain.

A fine-tuning set of another domain than the Bible (kseq.data.bible): short
imperative, technical strings with placeholders and markup. The pairs come
from the French gettext catalogs (`*/locale/fr/LC_MESSAGES/*.po`) inside
three PyPI wheels, downloaded once with `pip download --no-deps` and checked
against pinned sha256 sums (see kseq.data.pypi_data):

- django==5.2.8, 13 catalogs, BSD-3-Clause (wheel metadata
  `License-Expression`; the catalogs are "distributed under the same license
  as the Django package");
- wagtail==7.2, 19 catalogs, BSD-3-Clause (wheel metadata; the catalogs'
  header names no other license);
- sphinx==8.2.3, 1 catalog, BSD-2-Clause (wheel metadata; the catalog is
  "distributed under the same license as the Sphinx project").

Only the derived pairs are kept, in `<cache>/<CACHE_SUBDIR>/messages-en-fr.tsv`
(the cache is `cache_dir`, else $KSEQ_CACHE_DIR, else ~/.cache/kseq).

What is kept: every translated entry that is not fuzzy (a guess the
translators have not confirmed), obsolete (`#~`) or the header (empty
msgid). A plural entry gives msgid -> msgstr[0] only: in every French
catalog form 0 is the one for n = 0 and 1, so it translates the English
singular, whereas which form pairs with msgid_plural depends on the
catalog's rule (django has two forms; wagtail and sphinx three, form 1 for
exact millions), and the plural sentence would mostly repeat the singular.
Both sides get `normalize_text`: NFC, and whitespace runs, the newlines of
wrapped messages and the no-break spaces French puts before ":", "?" and
"!" (U+00A0, U+202F: `str.isspace`) become one plain space. Placeholders
("%(name)s", "{}", "%s") and HTML tags stay as they are: they are the
domain, and a translator must carry them over. Pairs with an empty side
are dropped, and so are the four whose source has no letter (":", ",",
"…", ":?.!": separators, not language); placeholder-only templates such
as "%(field_label)s:" -> "%(field_label)s :" stay. Pairs whose sides are
equal ("URL", "Description", "%(value)s million", about 5%) are kept:
leaving a word as it is is a translation too. Duplicate sources (the same
msgid in several catalogs or contexts) keep their first translation, in
the fixed order django, wagtail, sphinx, catalogs sorted by path, entries
in file order. The parser agrees with the .mo files msgfmt compiled from
these catalogs (checked once, entry by entry, on all 33).

Counts (measured): 3,347 pairs (django 833, wagtail 1,683, sphinx 831,
after 339 duplicate sources): 2,686 train, 336 valid, 325 test.

Split rule (fixed): h = int(hashlib.sha1(source.encode()).hexdigest(), 16)
% 100 on the normalized English source; h < 10 is "test", 10 <= h < 20 is
"valid", the rest (about 80%) is "train".

Fine-tuning a finished `kseq-train translate` run on it:

    python -m kseq.data.software_messages data/messages
    kseq-train translate --init-from runs/translate \\
        --logdir runs/translate-messages --export-dir savedmodels/translate-messages \\
        --train-tsv data/messages/train.tsv --valid-tsv data/messages/valid.tsv \\
        --test-tsv data/messages/test.tsv
"""

import argparse
import collections
import os
import re
import sys
import zipfile

from kseq._atomic import write_bytes_atomic
from kseq._validation import check_choice
from kseq.data.pypi_data import cache_root, check_sha256, hash_split, load_cached_rows, pip_download
from kseq.data.text import normalize_text

Wheel = collections.namedtuple("Wheel", "package file sha256 size")
WHEELS = (  # the order of this tuple decides which duplicate is kept
    Wheel("django==5.2.8", "django-5.2.8-py3-none-any.whl",
          "37e687f7bd73ddf043e2b6b97cfe02fcbb11f2dbb3adccc6a2b18c6daa054d7f", 8_289_692),
    Wheel("wagtail==7.2", "wagtail-7.2-py3-none-any.whl",
          "2c0d41545976b57266e84df3f03e7dd812e6a4d0a8d61d5b76863fe021613973", 9_229_326),
    Wheel("sphinx==8.2.3", "sphinx-8.2.3-py3-none-any.whl",
          "4405915165f13521d875a8c29c8970800a0141c14cc5416a38feca4ea5d9b9c3", 3_589_741),
)
CACHE_SUBDIR = "messages-django-5.2.8-wagtail-7.2-sphinx-8.2.3"
TSV_NAME = "messages-en-fr.tsv"
CATALOG = re.compile(r"(.+/)?locale/fr/LC_MESSAGES/[^/]+\.po")
SPLITS = ("train", "valid", "test", "all")
SPLIT_RULE = (
    "h = int(hashlib.sha1(source.encode()).hexdigest(), 16) % 100; "
    'h < 10 -> "test", 10 <= h < 20 -> "valid", else "train"'
)

PoEntry = collections.namedtuple("PoEntry", "context msgid msgid_plural msgstr fuzzy")
PoEntry.__doc__ = """One catalog entry; `msgstr` is a tuple (one string, or msgstr[0], [1], ...)."""

_KEYWORD = re.compile(r'(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+(".*)')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"\s*')
_ESCAPE = re.compile(r'\\(?:([ntrabfv"\\?\'])|([0-7]{1,3})|x([0-9a-fA-F]{1,2}))|(\\.?)')
_SIMPLE_ESCAPES = dict(zip('ntrabfv"\\?\'', '\n\t\r\a\b\f\v"\\?\''))


def unescape(literal):
    """Turns a C string literal's body into its text.

    Octal and hex escapes are bytes of the UTF-8 encoding, as msgfmt reads them.

    Args:
        literal: the text between the quotes, escapes and all.

    Returns:
        The text.

    Raises:
        ValueError: an unknown escape.

    Example:
    >>> unescape(r'Say \\"hi\\"\\tthen\\nleave \\303\\251\\x41')
    'Say "hi"\\tthen\\nleave éA'
    """
    parts, last = [], 0
    for match in _ESCAPE.finditer(literal):
        parts += [literal[last:match.start()].encode("utf-8"), _escaped_byte(match)]
        last = match.end()
    parts.append(literal[last:].encode("utf-8"))
    return b"".join(parts).decode("utf-8")


def _escaped_byte(match):
    simple, octal, hexa, bad = match.groups()
    if bad is not None:
        raise ValueError(f"unknown escape {bad!r}")
    if simple:
        return _SIMPLE_ESCAPES[simple].encode()
    return bytes([int(octal, 8) & 255 if octal else int(hexa, 16)])


def _name(key):
    return key if isinstance(key, str) else f"msgstr[{key}]"


class _Entries:
    """Collects entries while `parse_po` reads lines."""

    def __init__(self):
        self.done, self.fields, self.fuzzy, self.last = [], {}, False, None

    def flush(self):
        if "msgid" in self.fields:
            plural = sorted(key for key in self.fields if isinstance(key, int))
            strings = tuple(self.fields[key] for key in plural) or (self.fields.get("msgstr", ""),)
            self.done.append(PoEntry(self.fields.get("msgctxt"), self.fields["msgid"],
                                     self.fields.get("msgid_plural"), strings, self.fuzzy))
        self.fields, self.fuzzy, self.last = {}, False, None

    def start(self, key, text):
        has_msgstr = "msgstr" in self.fields or 0 in self.fields
        if key in ("msgctxt", "msgid") and has_msgstr:
            self.flush()  # entries not separated by a blank line
        if key not in ("msgctxt", "msgid") and "msgid" not in self.fields:
            raise ValueError(f"{_name(key)} before msgid")
        if key in self.fields:
            raise ValueError(f"{_name(key)} given twice")
        self.fields[key], self.last = text, key

    def comment(self, line):
        if self.last is not None and self.last not in ("msgctxt", "msgid", "msgid_plural"):
            self.flush()  # a comment after msgstr starts the next entry
        if line.startswith("#,"):
            self.fuzzy |= "fuzzy" in (flag.strip() for flag in line[2:].split(","))


def _read_line(entries, line):
    if not line:
        entries.flush()
    elif line.startswith("#~"):
        return  # obsolete: kept by msgmerge for reference, not used
    elif line.startswith("#"):
        entries.comment(line)
    elif line.startswith('"'):
        if entries.last is None:
            raise ValueError("a string continues no keyword")
        entries.fields[entries.last] += _literal(line)
    else:
        match = _KEYWORD.fullmatch(line)
        if not match:
            raise ValueError(f"not a .po line: {line[:60]!r}")
        keyword, index, rest = match.groups()
        entries.start(int(index) if index is not None else keyword, _literal(rest))


def _literal(text):
    match = _STRING.fullmatch(text)
    if not match:
        raise ValueError(f"not one quoted string: {text[:60]!r}")
    return unescape(match.group(1))


def parse_po(text, name="<po>"):
    """The entries of a gettext catalog, obsolete (`#~`) ones left out.

    Fuzzy entries and the header (empty msgid) are returned, flagged or
    recognisable, so that the choice to drop them is `message_pairs`'s.

    Args:
        text: the catalog (a str; the pinned catalogs are UTF-8).
        name: the file, for error messages.

    Returns:
        A list of `PoEntry` in file order.

    Raises:
        ValueError: a malformed line, naming `name` and the line number.

    Example:
    >>> parse_po('#, fuzzy\\nmsgid "a"\\nmsgstr "b"\\n\\nmsgid "Hello, "\\n"%(name)s"\\nmsgstr "Bonjour"')
    [PoEntry(context=None, msgid='a', msgid_plural=None, msgstr=('b',), fuzzy=True), \
PoEntry(context=None, msgid='Hello, %(name)s', msgid_plural=None, msgstr=('Bonjour',), fuzzy=False)]
    """
    entries = _Entries()
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            _read_line(entries, line.strip())
        except ValueError as error:
            raise ValueError(f"{name}, line {number}: {error}") from None
    entries.flush()
    return entries.done


def message_pairs(entries):
    """Gives the (source, target) pairs of the entries worth learning from, normalized.

    Skips fuzzy entries, the header, untranslated entries and sources
    without a letter (":", "…": separators, not language); a plural entry
    gives msgid -> msgstr[0] (module docstring). Duplicates are not removed
    here: that is `dedup_by_source`'s, across catalogs.

    Args:
        entries: `PoEntry`s (`parse_po`).

    Returns:
        A list of (source, target) strings, in the entries' order.

    Example:
    >>> message_pairs(parse_po('msgid "Save\\\\n"\\nmsgstr "Enregistrer\\u00a0!"'))
    [('Save', 'Enregistrer !')]
    """
    pairs = []
    for entry in entries:
        source, target = normalize_text(entry.msgid), normalize_text(entry.msgstr[0])
        if not entry.fuzzy and target and any(c.isalpha() for c in source):  # the header has no letter
            pairs.append((source, target))
    return pairs


def dedup_by_source(rows):
    """Keeps each source once, its first row (so the order of the catalogs decides; see `WHEELS`).

    Args:
        rows: (origin, source, target) tuples.

    Returns:
        A list of the kept rows, in their order.

    Example:
    >>> dedup_by_source([("a", "May", "mai"), ("a", "Save", "Enregistrer"), ("b", "May", "Mai")])
    [('a', 'May', 'mai'), ('a', 'Save', 'Enregistrer')]
    """
    seen, kept = set(), []
    for row in rows:
        if row[1] not in seen:
            seen.add(row[1])
            kept.append(row)
    return kept


def split_of(source):
    """Gives the fixed split of a normalized English source, by `SPLIT_RULE`.

    Args:
        source: a normalized source message.

    Returns:
        "train", "valid" or "test".

    Example:
    >>> split_of("Save and continue editing")
    'train'
    """
    return hash_split(source, test_percent=10, valid_percent=10)


def wheel_pairs(wheel_path, package):
    """Reads the pairs of a wheel's French catalogs, sorted by path, not yet deduplicated.

    Args:
        wheel_path: the wheel file.
        package: the package's name, the rows' origin.

    Returns:
        A list of (package, source, target) tuples.

    Raises:
        RuntimeError: the wheel holds no French catalog.
        ValueError: a malformed catalog (see `parse_po`).
    """
    rows = []
    with zipfile.ZipFile(wheel_path) as wheel:
        for member in sorted(name for name in wheel.namelist() if CATALOG.fullmatch(name)):
            text = wheel.read(member).decode("utf-8")
            rows += [(package, *pair) for pair in message_pairs(parse_po(text, member))]
    if not rows:
        raise RuntimeError(f"{wheel_path} holds no French message catalog ({CATALOG.pattern})")
    return rows


def download_wheel(wheel, directory):
    """Downloads one of `WHEELS` with pip (tests replace this).

    Args:
        wheel: an entry of `WHEELS`.
        directory: where pip writes it.

    Returns:
        The wheel's path.

    Raises:
        RuntimeError: the download failed.
    """
    return pip_download(wheel.package, wheel.file, directory,
                        f"copy {TSV_NAME} and its .sha256 file from another machine's cache")


def _build(work):
    rows = []
    for wheel in WHEELS:
        path = download_wheel(wheel, work)
        check_sha256("wheel", path, wheel.sha256, wheel.size)
        rows += wheel_pairs(path, wheel.package.split("==")[0])
    unique = dedup_by_source(rows)
    per_package = collections.Counter(package for package, _, _ in unique)
    return unique, (f"{len(unique)} pairs ({', '.join(f'{p} {n}' for p, n in per_package.items())}; "
                    f"{len(rows) - len(unique)} duplicate sources dropped)")


def cache_path(cache_dir=None):
    """Gives where the derived pairs are cached (the file may not exist yet).

    Args:
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        The TSV path.

    Example:
    >>> cache_path("/data/kseq")
    '/data/kseq/messages-django-5.2.8-wagtail-7.2-sphinx-8.2.3/messages-en-fr.tsv'
    """
    return os.path.join(cache_root(cache_dir), CACHE_SUBDIR, TSV_NAME)


def _download_size():
    return f"{sum(wheel.size for wheel in WHEELS) / 1e6:.0f} MB, {len(WHEELS)} wheels"


def load_message_pairs(split="train", cache_dir=None):
    """English->French message pairs of one split, downloading them once.

    Args:
        split: "train", "valid", "test" (see `SPLIT_RULE`) or "all".
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        (sources, targets): lists of strings, in the fixed catalog order.

    Raises:
        RuntimeError: the download failed or a checksum did not match.

    Example:
        sources, targets = load_message_pairs("valid")
    """
    check_choice("split", split, SPLITS)
    rows = load_cached_rows(cache_path(cache_dir), "django, wagtail and sphinx", _download_size(), _build)
    chosen = [(en, fr) for _, en, fr in rows if split == "all" or split_of(en) == split]
    return [en for en, _ in chosen], [fr for _, fr in chosen]


def write_tsv_splits(folder, cache_dir=None):
    """Writes `train.tsv`, `valid.tsv` and `test.tsv` for `kseq-train translate --train-tsv` and the like.

    Each file holds source<TAB>target lines and is written atomically.

    Args:
        folder: where to write them, made if missing.
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Returns:
        {split: path} for the three splits.

    Raises:
        NotADirectoryError: `folder` is a file.
        RuntimeError: the download failed or a checksum did not match.
    """
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f"{folder} is a file; give a folder for train.tsv, valid.tsv and test.tsv")
    os.makedirs(folder, exist_ok=True)
    paths = {}
    for split in ("train", "valid", "test"):
        sources, targets = load_message_pairs(split, cache_dir)
        paths[split] = os.path.join(folder, f"{split}.tsv")
        lines = "".join(f"{en}\t{fr}\n" for en, fr in zip(sources, targets))
        write_bytes_atomic(paths[split], lines.encode("utf-8"))
    return paths


def main(argv=None):
    """Runs `python -m kseq.data.software_messages FOLDER`: writes the splits and prints a fine-tuning command.

    Args:
        argv: the command-line arguments. Default None: `sys.argv[1:]`.

    Raises:
        SystemExit: on a bad argument, or an error writing the files (its message).
    """
    parser = argparse.ArgumentParser(
        prog="python -m kseq.data.software_messages",
        description="Write English->French UI messages (django, wagtail, sphinx catalogs) as "
                    "train.tsv, valid.tsv and test.tsv for kseq-train translate.")
    parser.add_argument("folder", help="where to write the three TSV files (created if missing)")
    parser.add_argument("--cache-dir", help="the kseq cache (default $KSEQ_CACHE_DIR, else ~/.cache/kseq)")
    args = parser.parse_args(argv)
    try:
        paths = write_tsv_splits(args.folder, args.cache_dir)
    except (OSError, RuntimeError, ValueError) as error:
        sys.exit(f"{parser.prog}: error: {' '.join(str(error).split())}")
    for split, path in paths.items():
        with open(path, encoding="utf-8") as file:
            print(f"{split}: {sum(1 for _ in file)} pairs in {path}")
    print(f"fine-tune: kseq-train translate --init-from runs/translate --logdir runs/translate-messages "
          f"--export-dir savedmodels/translate-messages --train-tsv {paths['train']} "
          f"--valid-tsv {paths['valid']} --test-tsv {paths['test']}")


if __name__ == "__main__":
    main()
