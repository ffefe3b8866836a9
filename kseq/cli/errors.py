"""The two ways a command stops early, and so its two exit statuses.

`UsageError` (`kseq.errors`, shared with kseq-train's tasks): the command
line asks for what the export or the files cannot give; the commands
report it as argparse reports a bad option (usage, the message, exit 2).
`Failure`: the input or the run fails (one line, exit 1).
"""

from kseq.errors import UsageError

__all__ = ["Failure", "UsageError"]


class Failure(Exception):
    """The input or the run fails: reported as one line, exit 1.

    A line that is not UTF-8, an unknown label, a model that cannot load:
    one line naming the file and the line, as the tasks' messages do.

    Args:
        message: the message, naming the file and line.
        line: the first input line it names, if any; None (default) for none.
    """

    def __init__(self, message, line=None):
        super().__init__(message)
        self.line = line
