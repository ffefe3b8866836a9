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

from kseq.cli.quiet_start import probe_gpus_quietly, quiet_tensorflow_start
from kseq.errors import CommandParser


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
    parser.add_argument("--logdir", default=os.path.join("runs", "recipes", name),
                        help="TensorBoard logs and the checkpoint (default %(default)s)")
    parser.add_argument("--export-dir", default=os.path.join("savedmodels", "recipes", name),
                        help="the SavedModel's numbered versions, TF Serving's model folder (default %(default)s)")
    flags = parser.parse_args(argv)
    with quiet_tensorflow_start():
        from kseq import _backend  # noqa: F401  (keras and TensorFlow, the backend checked)
    from kseq.training.config import writable_folder_problems
    from kseq.training.devices import tune_cpu_runtime

    # The folders are tried as kseq-train tries them (a folder made and removed there), before anything is written.
    problems = [*writable_folder_problems("--logdir", flags.logdir),
                *writable_folder_problems("--export-dir", flags.export_dir, export=True)]
    if problems:
        parser.error(problems[0])
    tune_cpu_runtime()
    probe_gpus_quietly()
    return flags
