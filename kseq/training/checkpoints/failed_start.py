"""A run that a user's mistake stops before it trains leaves its folder as it found it.

Every option, path and combination is checked when the command line is
parsed, before anything is written (`kseq.training.config.options.parse`):
none of those reaches this module. What is kept here is for the mistakes
only the data can tell, found after the run made its logdir and wrote
config.yaml (`kseq.training.task.Run`): a data file without a good line
or of one label, a `--vocab-size` under what the data's characters need,
a `--top-k` over the vocabulary the run ended with, `--init-from` weights
that do not fit the model. Left there, a half-written run folder would be
taken by the next run for one to resume. `StartRecord` notes what the
folder held when the run started; `undone_on_usage_error` (around the
command, `kseq.cli.train`) takes away what the runs started inside it
added, unless they began training. A folder that existed before keeps all
it held, the files a start rewrites put back: a run to resume stays one.
"""

import contextlib
import os
import shutil

from kseq._atomic import write_bytes_atomic
from kseq.errors import UsageError

# The files a start writes over in a folder that exists (config.yaml, the
# tokenizer's): their bytes are kept to put back.
REWRITTEN = ("config.yaml", "spm.model", "tokenizer.json")

# Runs started inside `undone_on_usage_error` and not yet training, oldest
# first; outside one (a task's main called from Python) none is kept.
_starting = []
_open_blocks = 0


class StartRecord:
    """What a run's folder held when the run started.

    Args:
        folder: the run's logdir, made or not.
    """

    def __init__(self, folder):
        self.folder = os.path.abspath(folder)
        made = self.folder
        while not os.path.exists(os.path.dirname(made)):  # the highest folder this run will make
            made = os.path.dirname(made)
        self.made = None if os.path.exists(self.folder) else made
        self.entries = set() if self.made else set(os.listdir(self.folder))
        self.kept = {} if self.made else {name: _read(os.path.join(self.folder, name)) for name in REWRITTEN
                                          if os.path.isfile(os.path.join(self.folder, name))}

    def undo(self):
        """Takes away the folders the run made, or the entries it added to a folder that existed.

        The files it wrote over there (`REWRITTEN`) get their bytes back.
        """
        if self.made:
            shutil.rmtree(self.made, ignore_errors=True)
            return
        if not os.path.isdir(self.folder):
            return
        for name in set(os.listdir(self.folder)) - self.entries:
            path = os.path.join(self.folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        for name, content in self.kept.items():
            write_bytes_atomic(os.path.join(self.folder, name), content)


def starting(folder):
    """Notes that a run starts in `folder`, before it writes there.

    Args:
        folder: the run's logdir.

    Returns:
        Its `StartRecord`, to pass to `training` when the run begins to train;
        None outside `undone_on_usage_error`, where nothing would undo it.
    """
    if not _open_blocks:
        return None
    record = StartRecord(folder)
    _starting.append(record)
    return record


def training(record):
    """Notes that the run of `record` trains (or trained before): what it writes now is kept.

    Args:
        record: what `starting` gave (None: nothing to do).
    """
    if record in _starting:
        _starting.remove(record)


@contextlib.contextmanager
def undone_on_usage_error():
    """Undoes the runs started inside the block, and not training, when a `UsageError` ends it.

    The error goes on to the caller.

    Returns:
        A context manager.
    """
    global _open_blocks
    outside = list(_starting)  # runs started before the block are not its to undo
    _open_blocks += 1
    try:
        yield
    except UsageError:
        for record in reversed(_starting):
            if record not in outside:
                record.undo()
        raise
    finally:
        _open_blocks -= 1
        _starting[:] = [record for record in _starting if record in outside]


def _read(path):
    with open(path, "rb") as f:
        return f.read()
