"""What a recipe script (recipes/*.py) does first: its three flags, and TensorFlow set up as kseq-train sets it.

`python recipes/NAME.py [--minutes M] [--logdir DIR] [--export-dir DIR]`:
the training budget, the TensorBoard folder and the folder of the
SavedModel's versions. A bad value is one line on stderr, `NAME.py: error:
argument --minutes: ...`, and exit status 2, as kseq-train answers a bad
option (docs/errors.md); nothing has been written by then.
"""

import argparse
import math
import os

from kseq._quiet_start import probe_gpus_quietly
from kseq.errors import CommandParser
from kseq.training.devices import tune_cpu_runtime


class RecipeParser(CommandParser):
    """`CommandParser` whose errors are the one line `prog: error: message`."""

    def print_usage(self, file=None):
        """Prints nothing: argparse prints the usage only before an error, and the error's line names the flag."""


def minutes(text: str) -> float:
    """An argparse type: a finite number of minutes above 0.

    Args:
        text: the flag's value.

    Returns:
        The minutes, a float.

    Raises:
        argparse.ArgumentTypeError: `text` is no number above 0.
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of minutes above 0, e.g. 0.5; got {text!r}")
    return value


def folder(text: str) -> str:
    """An argparse type: a folder that exists or can be made (no file stands in its path).

    Args:
        text: the flag's value.

    Returns:
        `text`.

    Raises:
        argparse.ArgumentTypeError: it is empty, names a file, or lies under a file or a folder
            this user cannot write to.
    """
    if not text:
        raise argparse.ArgumentTypeError("expected a folder; got ''")
    path = os.path.abspath(text)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"expected a folder; {path} is a file")
    if not os.access(path, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"expected a folder you can write to; {path} is not writable")
    return text


def start(name: str, description: str, default_minutes: float, argv: list[str] | None = None) -> argparse.Namespace:
    """Parses a recipe's flags (`--minutes`, `--logdir`, `--export-dir`), then sets TensorFlow up as kseq-train does.

    After the flags: one CPU thread pool a core (`tune_cpu_runtime`: the
    default pools leave a core idle under MirroredStrategy), and the GPUs
    listed once, without the CUDA driver's error line on a machine that has
    no NVIDIA driver.

    Args:
        name: the recipe, e.g. "01_rnn_language_model": the default folders
            are `runs/recipes/<name>` and `savedmodels/recipes/<name>`.
        description: what `--help` shows (the recipe's docstring).
        default_minutes: the training budget without `--minutes`.
        argv: the flags; None (default) reads the command line.

    Returns:
        argparse.Namespace with `minutes` (float), `logdir` and `export_dir`.

    Raises:
        SystemExit: 2 after one line on stderr for a bad value; 0 after `--help`.
    """
    parser = RecipeParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=minutes, default=default_minutes,
                        help=f"training time; evaluation and export come after it (default {default_minutes})")
    parser.add_argument("--logdir", type=folder, default=os.path.join("runs", "recipes", name),
                        help="TensorBoard logs and the checkpoint (default %(default)s)")
    parser.add_argument("--export-dir", type=folder, default=os.path.join("savedmodels", "recipes", name),
                        help="the SavedModel's numbered versions, TF Serving's model folder (default %(default)s)")
    flags = parser.parse_args(argv)
    tune_cpu_runtime()
    probe_gpus_quietly()
    return flags
