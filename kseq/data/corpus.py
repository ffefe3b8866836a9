"""Parallel corpora of any size on disk: `source<TAB>target` lines in one
file, several, or a glob, plain or gzip.

Nothing here holds a corpus. `scan_corpus` reads it once as a stream and
keeps only what is bounded: the line count of each file, the bad lines
(counted, the first few by number), a uniform sample of pairs (reservoir
sampling, for the vocabulary and the data's statistics) and, when asked,
a validation set held out by line number. The scan is cached under the
kseq cache folder, keyed by the files' paths, sizes and modification
times, so a second run on the same files skips the pass.
`kseq.data.streaming` then reads the lines with tf.data while training.
"""

import dataclasses
import glob
import gzip
import hashlib
import json
import os
import random
import zlib

from kseq._atomic import write_bytes_atomic, write_json_atomic
from kseq._validation import check_positive_int
from kseq.data.pypi_data import cache_root
from kseq.data.text import normalize_text
from kseq.data.tsv import DOCUMENT, EMPTY_LINE, EMPTY_SOURCE, EMPTY_TARGET, GZIP_MAGIC, LABELLED, MANY_TABS, NO_TAB
from kseq.data.tsv import NOT_UTF8, PAIR, no_good_line
from kseq.errors import UsageError

BOM = "\ufeff"
# Bad lines spelled out in a report; the rest are counted.
PROBLEMS_KEPT = 20
# Bump when what a scan computes changes, so that old cache entries are ignored.
SCAN_VERSION = 3
# Distinct labels a labelled corpus (text<TAB>label) may hold: more means the
# second column is not a label, and counting it would hold the corpus.
MAX_LABELS = 1000


def corpus_files(spec, argument="files"):
    """Lists the files `spec` names: a path, a glob ("data/*.tsv.gz"), several of either joined by commas, or a list.

    Globs are sorted; a file named twice is read once.

    Args:
        spec: a string of comma-separated paths and globs, or a list or tuple of them ("~" expanded).
        argument: the option's name, for the error messages. Default "files".

    Returns:
        A list of file paths.

    Raises:
        UsageError: a part names no file, a directory or an unreadable file, or
            `spec` names none at all (the message names `argument`; a ValueError).

    Example:
        corpus_files("train.tsv.gz")          # ['train.tsv.gz']
        corpus_files("shards/*.tsv,extra.tsv")
    """
    parts = list(spec) if isinstance(spec, (list, tuple)) else str(spec).split(",")
    files = []
    for part in (os.path.expanduser(str(p).strip()) for p in parts):
        if not part:
            continue
        if glob.has_magic(part):
            matches = sorted(path for path in glob.glob(part) if os.path.isfile(path))
            if not matches:
                raise UsageError(f"{argument} {part}: the pattern matches no file")
        elif os.path.isdir(part):
            raise UsageError(f"{argument} {part}: is a directory, not a file (a glob such as {part}/*.tsv reads "
                             "the files in it)")
        elif not os.path.isfile(part):
            raise UsageError(f"{argument} {part}: no such file")
        else:
            matches = [part]
        for path in matches:
            if not os.access(path, os.R_OK):
                raise UsageError(f"{argument} {path}: not readable (permission denied)")
        files += [path for path in matches if path not in files]
    if not files:
        raise UsageError(f"{argument}: names no file; got {spec!r}")
    return files


def compression_of(path):
    """Tells a file's compression by its magic bytes, whatever its name.

    Args:
        path: the file.

    Returns:
        "GZIP" for a gzip file, else "".
    """
    with open(path, "rb") as f:
        return "GZIP" if f.read(2) == GZIP_MAGIC else ""


def raw_lines(path):
    """Reads the lines of `path` as a stream (gzip by its magic bytes), without their "\\n".

    A final newline ends the last line, it does not start an empty one, as
    tf.data's TextLineDataset reads it.

    Args:
        path: the file.

    Returns:
        A generator of lines as bytes.

    Raises:
        UsageError: a gzip file is damaged or cut short (the message names
            the last line read).
    """
    opener = gzip.open if compression_of(path) else open
    number = 0
    try:
        with opener(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                yield line[:-1] if line.endswith(b"\n") else line
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:  # only gzip's reader raises these
        raise UsageError(f"{path}: a damaged gzip file, unreadable after line {number} ({error}): expected a "
                         "whole gzip file") from None


def line_problem(raw, fields=2):
    """Reads one raw line as a pair (or a text), or says why it is not one.

    The reasons are those of `kseq.data.tsv.read_tsv`, which the streaming
    pipeline drops in the graph with the same rules.

    Args:
        raw: the line as bytes, without its newline.
        fields: 2 for a `source<TAB>target` pair; 1 for one text, tabs and all. Default 2.

    Returns:
        (row, None): (source, target) or (text,) strings, not yet normalized;
        or (None, reason) for a bad line.
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, NOT_UTF8
    line = line.removeprefix(BOM).removesuffix("\r")
    if not line.strip():
        return None, EMPTY_LINE
    if fields == 1:
        return (line,), None
    fields = line.split("\t")
    if len(fields) != 2:
        return None, NO_TAB if len(fields) == 1 else MANY_TABS
    # normalize_text(x) is "" exactly when x is whitespace: no need to normalize every line.
    if not fields[0].strip():
        return None, EMPTY_SOURCE
    if not fields[1].strip():
        return None, EMPTY_TARGET
    return (fields[0], fields[1]), None


@dataclasses.dataclass(frozen=True)
class HoldOut:
    """Validation pairs taken from the training files by line number: every
    `every`-th line (the first, then every `every`-th after it, counting the
    lines of all files in the order given), at most `limit` of them."""

    every: int
    limit: int

    @property
    def below(self):
        """Line numbers (0-based, over all files) from which nothing is held out."""
        return self.every * self.limit

    def holds(self, line):
        """Tells whether line number `line` is held out.

        Args:
            line: the line's number, from 0 over all files.

        Returns:
            True for every `every`-th line below `below`.
        """
        return line % self.every == 0 and line < self.below


@dataclasses.dataclass
class CorpusScan:
    """What one streaming pass over a corpus found (see `scan_corpus`).

    files, compressions, line_counts: each file, "GZIP" or "", its lines.
    bad: bad lines; reasons: their count by reason; problems: the first
    few, as (file, line number from 1, reason).
    held_out: good lines held out for validation.
    sample: (sources, targets) of up to `sample_size` training pairs drawn
        uniformly, normalized, in file order when the corpus is no larger;
        (texts,) for a corpus of one text a line (`fields=1`).
    valid: held out, normalized, as `sample`; empty without a hold-out.
    hold_out: the `HoldOut` rule, or None.
    labels: {label: its training lines} of a labelled corpus (the second
        column, normalized; `scan_corpus(..., count_labels=True)`), else None.
    """

    files: list
    compressions: list
    line_counts: list
    bad: int
    reasons: dict
    problems: list
    held_out: int
    sample: tuple
    valid: tuple
    hold_out: HoldOut | None = None
    labels: dict | None = None
    folder: str | None = None  # its cache entry, where derived files (a vocabulary) may be kept too

    @property
    def lines(self):
        """Lines in all files, bad and held-out ones included."""
        return sum(self.line_counts)

    @property
    def pairs(self):
        """Good training pairs: lines neither bad nor held out."""
        return self.lines - self.held_out - self.bad

    @property
    def offsets(self):
        """The number of each file's first line among all files' lines."""
        starts, total = [], 0
        for count in self.line_counts:
            starts.append(total)
            total += count
        return starts

    def describe_problems(self, limit=5):
        """Describes the bad lines for a message, e.g. "skipped 3 of 1,200 lines: a.tsv line 4 (no tab), ...".

        Args:
            limit: the bad lines named; the rest are counted. Default 5.

        Returns:
            The description, or "" without bad lines.
        """
        if not self.bad:
            return ""
        several = len(self.files) > 1
        shown = ", ".join(f"{os.path.basename(path) + ' ' if several else ''}line {number} ({reason})"
                          for path, number, reason in self.problems[:limit])
        name = "" if several else f" in {os.path.basename(self.files[0])}"
        rest = self.bad - min(limit, len(self.problems))
        more = f" and {rest:,} more" if rest > 0 else ""
        counts = ", ".join(f"{count:,} {reason}" for reason, count in sorted(self.reasons.items()))
        return f"skipped {self.bad:,} of {self.lines:,} lines{name}: {shown}{more} ({counts})"


def scan_corpus(files, sample_size=100_000, seed=0, hold_out=None, cache_dir=None, use_cache=True,
                count_labels=False, fields=2):
    """Reads `files` once as a stream into a `CorpusScan`; memory bounded by `sample_size` (and the hold-out's limit).

    Every line is checked (`line_problem`); good training lines go through
    reservoir sampling (algorithm R, seeded by `seed`), so the sample is a
    uniform draw of `sample_size` pairs, or every pair, in file order, when
    there are no more. The result is cached in `<cache>/corpora/<key>/`
    (key: the files' absolute paths, sizes and modification times, and the
    arguments).

    Args:
        files: the corpus files (see `corpus_files`).
        sample_size: the most training pairs sampled. Default 100,000.
        seed: the sampling's seed. Default 0.
        hold_out: a `HoldOut` rule for validation lines, or None. Default None.
        cache_dir: the kseq cache; default $KSEQ_CACHE_DIR, else ~/.cache/kseq.
        use_cache: read a cached scan; False scans again. Default True.
        count_labels: read the lines as text<TAB>label and count each label's
            training lines. Default False.
        fields: 2 for `source<TAB>target` lines; 1 reads each line as one text
            (a language model's documents). Default 2.

    Returns:
        The `CorpusScan`.

    Raises:
        UsageError: the files hold no good training line (the message names
            the first bad line, `kseq.data.tsv.no_good_line`) or more than
            `MAX_LABELS` labels where they are counted; a ValueError.
        ValueError: a bad `sample_size`, or `fields` not 2, or 1 with
            `count_labels`.
    """
    check_positive_int("sample_size", sample_size)
    files = [os.fspath(path) for path in files]
    if fields not in (1, 2) or (fields == 1 and count_labels):
        raise ValueError(f"`fields` must be 2, or 1 without `count_labels`; got {fields!r}.")
    key = _scan_key(files, sample_size, seed, hold_out, count_labels, fields)
    folder = os.path.join(cache_root(cache_dir), "corpora", key)
    if use_cache:
        cached = _load_scan(folder, files, hold_out, fields)
        if cached is not None:
            return cached
    scan = _scan(files, sample_size, seed, hold_out, count_labels, fields)
    scan.folder = folder
    if not scan.sample[0]:
        columns = DOCUMENT if fields == 1 else LABELLED if count_labels else PAIR
        first = scan.problems[0] if scan.problems else None
        raise UsageError(no_good_line(files, first, columns, scan.held_out))
    _save_scan(folder, scan)
    return scan


def _scan(files, sample_size, seed, hold_out, count_labels, fields):
    draw = random.Random(seed)
    labels = {} if count_labels else None
    sample, valid, problems, reasons = [], [], [], {}
    line_counts, compressions = [], []
    bad = held = seen = number = 0
    for path in files:
        compressions.append(compression_of(path))
        count = 0
        for count, raw in enumerate(raw_lines(path), start=1):
            pair, reason = line_problem(raw, fields)
            if reason:
                bad += 1
                reasons[reason] = reasons.get(reason, 0) + 1
                if len(problems) < PROBLEMS_KEPT:
                    problems.append((path, count, reason))
            elif hold_out is not None and hold_out.holds(number):
                held += 1
                valid.append(pair)
            else:
                if labels is not None:
                    _count_label(labels, normalize_text(pair[1]), path, count)
                if seen < sample_size:
                    sample.append(pair)
                else:
                    slot = draw.randrange(seen + 1)
                    if slot < sample_size:
                        sample[slot] = pair
                seen += 1
            number += 1
        line_counts.append(count)
    return CorpusScan(files, compressions, line_counts, bad, reasons, problems, held,
                      _normalized(sample, fields), _normalized(valid, fields), hold_out, labels)


def _count_label(labels, label, path, number):
    if label not in labels and len(labels) == MAX_LABELS:
        raise UsageError(f"{path}: line {number} has distinct label number {MAX_LABELS + 1:,}: expected "
                         f"text<TAB>label lines with at most {MAX_LABELS:,} distinct labels")
    labels[label] = labels.get(label, 0) + 1


def training_pairs(scan):
    """Reads the training pairs of a two-field scanned corpus again from its files, as a stream.

    Training pairs are the good lines not held out, normalized: for a
    measure over the whole corpus that keeps only what it is after.

    Args:
        scan: a `CorpusScan` of `source<TAB>target` lines.

    Returns:
        A generator of (source, target) strings.
    """
    number = 0
    for path in scan.files:
        for raw in raw_lines(path):
            pair, reason = line_problem(raw)
            if not reason and not (scan.hold_out is not None and scan.hold_out.holds(number)):
                yield normalize_text(pair[0]), normalize_text(pair[1])
            number += 1


def _normalized(rows, fields):
    """Rows of `fields` texts -> a list of normalized texts a field."""
    return tuple([normalize_text(row[field]) for row in rows] for field in range(fields))


def _scan_key(files, sample_size, seed, hold_out, count_labels, fields):
    stats = [(os.path.abspath(path), os.stat(path).st_size, os.stat(path).st_mtime_ns) for path in files]
    rule = dataclasses.asdict(hold_out) if hold_out else None
    text = json.dumps([SCAN_VERSION, stats, sample_size, seed, rule, count_labels, fields])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


SUMMARY, SAMPLE, VALID = "scan.json", "sample.tsv.gz", "valid.tsv.gz"


def _save_scan(folder, scan):
    os.makedirs(folder, exist_ok=True)
    for name, columns in ((SAMPLE, scan.sample), (VALID, scan.valid)):
        text = "".join("\t".join(row) + "\n" for row in zip(*columns))
        write_bytes_atomic(os.path.join(folder, name), gzip.compress(text.encode("utf-8"), mtime=0))
    summary = {name: getattr(scan, name) for name in
               ("files", "compressions", "line_counts", "bad", "reasons", "problems", "held_out", "labels")}
    write_json_atomic(os.path.join(folder, SUMMARY), summary)  # last: it marks the entry complete


def _load_scan(folder, files, hold_out, fields):
    try:
        with open(os.path.join(folder, SUMMARY), encoding="utf-8") as f:
            summary = json.load(f)
        pairs = {}
        for name in (SAMPLE, VALID):
            with gzip.open(os.path.join(folder, name), "rt", encoding="utf-8") as f:
                rows = [line.rstrip("\n") for line in f]
            pairs[name] = (rows,) if fields == 1 else tuple(map(list, zip(*(row.split("\t") for row in rows)))) \
                or ([], [])
    except (OSError, ValueError, EOFError):
        return None
    if summary.get("files") != files:
        return None
    summary["problems"] = [tuple(problem) for problem in summary["problems"]]
    return CorpusScan(**summary, sample=pairs[SAMPLE], valid=pairs[VALID], hold_out=hold_out, folder=folder)
