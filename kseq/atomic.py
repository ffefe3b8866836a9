"""Files written whole or not at all: a temporary file beside the target,
renamed over it once complete (a rename within a folder is atomic)."""

import json
import os


def write_bytes_atomic(path, data):
    """Writes `data` to `path` so that readers see the old or the new file."""
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def write_json_atomic(path, value):
    """`json.dump(value)` (indented, UTF-8) to `path`, atomically."""
    write_bytes_atomic(path, json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8"))
