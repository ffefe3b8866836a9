"""kseq-train TASK [OPTIONS]: train, test and export one task's model.

Tasks (kseq.tasks, one module each, the same options as
`python recipes/<task>.py` in a checkout):

- translate: a Transformer or recurrent translator (default data: English ->
  French Bible verses);
- language_model: a word-level recurrent language model with truncated BPTT;
- classify: a sequence classifier over `text<TAB>label` lines;
- generate_reviews: a generator conditioned on a label;
- caption: an image captioner;
- reverse: the two-minute demo that learns to reverse words.

`kseq-train TASK --help` lists a task's options; `--config FILE` (YAML or
JSON) holds any of them, and each run writes the config it ran with to
`<logdir>/config.yaml`. Dashes and underscores in TASK are the same:
`kseq-train language-model`.
"""

import importlib
import sys

NAME = "kseq-train"
TASKS = ("translate", "language_model", "classify", "generate_reviews", "caption", "reverse")


def main(argv=None):
    """Runs `kseq-train TASK [OPTIONS]`, the installed command's entry point.

    Args:
        argv: the command line after the program's name; None (default)
            reads `sys.argv`.

    Raises:
        SystemExit: after printing the help (0, or 2 without a task), or 2
            for an unknown task.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if argv else 2)
    task = argv[0].replace("-", "_")
    if task not in TASKS:
        print(f"{NAME}: error: TASK must be one of {', '.join(TASKS)}; got {argv[0]!r}", file=sys.stderr)
        sys.exit(2)
    run(task, argv[1:])


def run(task, argv):
    """Runs `task` on the command line `argv`, as a fresh process would.

    Args:
        task: a name in TASKS, with underscores.
        argv: the task's options, a list of strings.
    """
    from kseq.training.devices.runtime import tune_cpu_runtime

    tune_cpu_runtime()
    module = importlib.import_module(f"kseq.tasks.{task}")
    # argparse names the program after argv[0] in usage lines and errors.
    sys.argv[0] = f"{NAME} {task}"
    module.main(argv)
