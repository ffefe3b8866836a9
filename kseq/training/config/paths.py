"""The paths options name, checked when the command line is parsed, before
a run writes anything: input files (`option(..., file=True)`, or
`files=True` for a path, a glob or several joined by commas), folders
read (`folder="read"`) and folders a run makes and writes
(`folder="write"`, or `folder="export"` for one that holds numbered
SavedModel versions).

A folder to write is tried, not only asked about: its nearest existing
folder must take a new folder (made and removed at once), which
`os.access` cannot tell for a file system such as /proc, where root may
"write" but nothing can be made.
"""

import contextlib
import os
import tempfile

from kseq.errors import UsageError

FOLDER_KINDS = ("read", "write", "export")
EXPECT_WRITABLE = "expected a folder this user can write in"


def path_problems(option_name, value, metadata):
    """Messages for the path an option names, by what its declaration says it is.

    Args:
        option_name: the flag, e.g. "--logdir".
        value: its value; None or "" names nothing.
        metadata: the field's `option` metadata.

    Returns:
        A list of at most one message.
    """
    if not value:
        return []
    if metadata.get("file"):
        return file_problems(option_name, value)
    if metadata.get("files"):
        from kseq.data.corpus import corpus_files

        try:
            corpus_files(value, option_name)
        except UsageError as error:
            return [str(error)]
        return []
    folder = metadata.get("folder")
    if folder == "read":
        return readable_folder_problems(option_name, value)
    if folder in ("write", "export"):
        return writable_folder_problems(option_name, value, export=folder == "export")
    return []


def file_problems(option_name, path):
    """[the message] when `path` is no readable file, else []."""
    if os.path.isdir(path):
        return [f"{option_name} {path}: is a directory, not a file"]
    if not os.path.isfile(path):
        return [f"{option_name} {path}: no such file"]
    if not os.access(path, os.R_OK):
        return [f"{option_name} {path}: not readable (permission denied)"]
    return []


def readable_folder_problems(option_name, path):
    """[the message] when `path` is no folder this user can read, else []."""
    if not os.path.exists(path):
        return [f"{option_name} {path}: no such folder"]
    if not os.path.isdir(path):
        return [f"{option_name} {path}: is a file, not a folder"]
    if not os.access(path, os.R_OK | os.X_OK):
        return [f"{option_name} {path}: not readable (permission denied)"]
    return []


def writable_folder_problems(option_name, path, export=False):
    """An output folder that exists as something else, lies under a file or
    cannot be written (made) there; for an export, one that is itself a
    SavedModel version (exports go to `<folder>/<next version>/`).

    Checked before the run writes anything: the export is written at the
    end of training, which must not be the moment to learn it cannot be.

    Args:
        option_name: the flag, for the message.
        path: the folder, as given.
        export: whether it holds numbered SavedModel versions.

    Returns:
        A list of at most one message.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        return [f"{option_name} {path} exists and is not a directory"]
    parent = os.path.abspath(path)
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent and not os.path.isdir(parent):
        return [f"{option_name} {path}: {parent} is a file, not a directory"]
    problems = _unwritable(option_name, path, parent)
    if not problems and export and os.path.isfile(os.path.join(path, "saved_model.pb")):
        return [f"{option_name} {path} is itself a SavedModel version (it holds saved_model.pb); pass the "
                f"folder that holds the numbered versions, e.g. {os.path.dirname(os.path.normpath(path)) or '.'}"]
    return problems


def _unwritable(option_name, path, existing):
    """[the message] when the folder `path` cannot be written or made, else [].

    Args:
        option_name: the option, for the message.
        path: the folder, as given.
        existing: `path` itself, or its nearest folder that exists.

    Returns:
        A list of at most one message.
    """
    if not os.access(existing, os.W_OK | os.X_OK):  # also refused to root on a read-only file system
        return [f"{option_name} {path}: cannot write in {existing}: {EXPECT_WRITABLE}"]
    with contextlib.suppress(OSError, ValueError):  # no such limit to ask for here
        longest = os.pathconf(existing, "PC_NAME_MAX")
        to_make = os.path.relpath(os.path.abspath(path), existing).split(os.sep)
        too_long = [name for name in to_make if name != "." and len(os.fsencode(name)) > longest]
        if too_long:
            return [f"{option_name} {path}: a folder name of {len(os.fsencode(too_long[0]))} bytes cannot be made "
                    f"in {existing}: expected names of at most {longest} bytes"]
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".kseq-write-check-", dir=existing))
    except OSError:
        return [f"{option_name} {path}: cannot write in {existing}: {EXPECT_WRITABLE}"]
    return []
