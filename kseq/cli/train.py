"""kseq-train TASK [OPTIONS]: train, test and export one task's model.

Tasks (kseq.tasks, one module each; `python -m kseq.cli.train TASK` is the
same command without the installed script):

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

A mistake in what a task is given (an option's value, a `--config` key it
does not take, an `--init-from` folder that holds no finished run, a data
file without a good line, ...) ends it with one line, `kseq-train TASK:
error: <message>`, and exit status 2, as a bad flag does. Options and
paths are checked before anything is written; a run folder begun before
the data showed a mistake is taken away again (docs/errors.md lists them).
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

    The one place a user's mistake (`kseq.errors.UsageError`) becomes the
    task's usage error: what the run had begun to write is taken away
    (`kseq.training.checkpoints.failed_start`), then one line is printed.
    TensorFlow is first loaded here, with the commands' quiet start
    (`kseq.cli.quiet_start`): `kseq-train --help` needs none of it.

    Args:
        task: a name in TASKS, with underscores.
        argv: the task's options, a list of strings.

    Raises:
        SystemExit: 2 for a user's mistake, with `kseq-train TASK: error:
            <message>` on stderr, as argparse's errors for the same
            command; the task's own exits otherwise.
    """
    from kseq.cli.quiet_start import probe_gpus_quietly, quiet_tensorflow_start

    with quiet_tensorflow_start():
        from kseq import _backend  # noqa: F401  (keras and TensorFlow, the backend checked)
    from kseq.errors import UsageError, refuse
    from kseq.training.checkpoints.failed_start import undone_on_usage_error
    from kseq.training.devices.runtime import tune_cpu_runtime
    from kseq.training.task import name_xla_cache

    tune_cpu_runtime()
    module = importlib.import_module(f"kseq.tasks.{task}")
    # argparse names the program after argv[0] in usage lines and errors.
    sys.argv[0] = prog = f"{NAME} {task}"
    try:
        with undone_on_usage_error():
            # TensorFlow reads XLA's flags once, at its first device query, which the GPU
            # probe is: the run's XLA cache is named before it (the task names the same again).
            name_xla_cache(module.parse_args(argv))
            probe_gpus_quietly()
            module.main(argv)
    except UsageError as error:
        refuse(prog, error)


if __name__ == "__main__":
    main()
