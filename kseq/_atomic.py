"""Files written whole or not at all: a temporary file beside the target,
renamed over it once complete (a rename within a folder is atomic)."""

import contextlib
import json
import os
import secrets


@contextlib.contextmanager
def atomic_writer(path):
    """Opens a binary file whose content replaces `path` when the block ends.

    On an error inside the block `path` stays as it was. Readers see the
    old or the new file, never half of one. The temporary name is unique to
    the process and the call, so parallel writers cannot collide (and it is
    not mkstemp, whose 0600 mode would ignore the umask).

    Args:
        path: the file to write; its folder must exist.

    Returns:
        A context manager yielding the temporary file, open for binary writing.
    """
    temporary = f"{path}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        with open(temporary, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def write_bytes_atomic(path, data):
    """Writes `data` to `path` whole or not at all (`atomic_writer`).

    Args:
        path: the file to write.
        data: bytes, its new content.
    """
    with atomic_writer(path) as f:
        f.write(data)


def write_json_atomic(path, value):
    """Writes `value` as JSON (indented, UTF-8) to `path`, atomically.

    Args:
        path: the file to write.
        value: a JSON-serialisable value.
    """
    write_bytes_atomic(path, json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8"))
