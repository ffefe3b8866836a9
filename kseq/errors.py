"""A user's mistake, and the one way the commands report it.

A data file that is empty or holds no line of the kind expected, a
`--config` key or value the task does not take, an `--init-from` folder
that holds no finished run, an output folder that cannot be written, a
`--tokenizer` file of another kind: each is a `UsageError` whose message
names the option, the file, the line and what was expected. `kseq-train`
(and `python -m kseq.cli.train`) prints it as argparse prints a bad flag,
`kseq-train TASK: error: <message>`, and exits with status 2 (`refuse`);
any other exception is a bug and keeps its traceback. docs/errors.md
lists the bad inputs and what each gets.
"""

import argparse
import difflib
import sys

# The exit status of a user's mistake: argparse's, for a bad flag.
USAGE_STATUS = 2


class UsageError(ValueError):
    """What a command was given cannot work: a file, a value or a folder the user named.

    The message names the option and the file (and the line), and says
    what was expected. A ValueError, so that code catching the ValueErrors
    kseq's functions document catches it too.

    Example:
    >>> try:
    ...     raise UsageError("--train-tsv bad.tsv: line 2 has no tab: expected source<TAB>target")
    ... except ValueError as error:
    ...     print(error)
    --train-tsv bad.tsv: line 2 has no tab: expected source<TAB>target
    """


def refuse(prog, message):
    """Reports a user's mistake as argparse reports a bad flag, without the usage, and exits.

    Prints `<prog>: error: <message>` (one line) on stderr.

    Args:
        prog: the command as argparse names it, e.g. "kseq-train translate".
        message: what is wrong: a string, or the `UsageError` itself.

    Raises:
        SystemExit: always, with status 2 (`USAGE_STATUS`).
    """
    # One line, whatever the message holds: a reader (or a script) takes the last line.
    line = str(message).replace("\n", " ")
    print(f"{prog}: error: {line}", file=sys.stderr)
    raise SystemExit(USAGE_STATUS)


class CommandParser(argparse.ArgumentParser):
    """argparse's parser whose "unrecognized arguments" error names the
    closest options, as `--eval-evry 3` -> "did you mean --eval-every?"
    (a task takes dozens of options; its usage line alone does not say
    which one was meant)."""

    def error(self, message):
        if message.startswith("unrecognized arguments:"):
            message += _closest_options(message.split(":", 1)[1].split(), self._option_string_actions)
        super().error(message)


def _closest_options(arguments, options):
    """The error's tail naming, for each of `arguments` that looks like an
    option, the nearest of `options`: ` (did you mean --a? --b?)`, or ""."""
    guesses = []
    for argument in arguments:
        if argument.startswith("--"):
            guesses += difflib.get_close_matches(argument.split("=", 1)[0], options, n=1, cutoff=0.6)
    return f" (did you mean {'? '.join(guesses)}?)" if guesses else ""
