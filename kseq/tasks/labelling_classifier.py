"""The classifier that labels `kseq-train generate_reviews`' samples: the
export under `--classifier-export`, or one `kseq-train classify` trains
first with `--classifier-args`; and the checks of those two options."""

import os
import shlex
import time

from kseq.export import latest_version
from kseq.tasks import classify
from kseq.training.config import flag, readable_folder_problems, refusal, writable_folder_problems


def classifier_args_problem(text):
    """The message when a shell cannot split `--classifier-args TEXT`, else None."""
    try:
        shlex.split(text)
    except ValueError as error:  # an unclosed quote: no options to pass on
        return f"--classifier-args {text}: {error}: expected kseq-train classify's options, as a shell splits them"
    return None


def classifier_export_problem(path):
    """The message when `--classifier-export PATH` holds no export to read and is no folder to export one to."""
    if os.path.isdir(path) and latest_version(path):
        return (readable_folder_problems("--classifier-export", path) or [None])[0]
    return (writable_folder_problems("--classifier-export", path, export=True) or [None])[0]


def classifier_args_refused(options):
    """Where a classifier will be trained here, `--classifier-args` as kseq-train classify checks it.

    Args:
        options: generate_reviews' options.

    Returns:
        A list of one message where classify refuses its options, else empty.
    """
    if latest_version(options.classifier_export):
        return []
    refused = refusal(classify.Options, classifier_argv(options))
    if not refused:
        return []
    return [f"--classifier-args {options.classifier_args}: kseq-train classify refuses it: {refused}"]



def classifier_path(options):
    """Finds the classifier export to label with, training one if there is none.

    That is the latest version under `--classifier-export`, else one that
    kseq-train classify trains now (with `--classifier-args`, on the same
    data).

    Args:
        options: the task's options.

    Returns:
        (the export's path, seconds spent training it: 0.0 for a found one).
    """
    path = latest_version(options.classifier_export)
    if path:
        print(f"classifier: {path}")
        return path, 0.0
    print(f"classifier: none under {options.classifier_export}; training one with "
          f"kseq-train classify {options.classifier_args}")
    start = time.time()
    classify.main(classifier_argv(options))
    return latest_version(options.classifier_export), time.time() - start


def classifier_argv(options):
    """kseq-train classify's command line when this task trains its classifier.

    Args:
        options: the task's options.

    Returns:
        `--classifier-args`, then the folders, seed, devices and data files of this run.
    """
    argv = shlex.split(options.classifier_args) + [
        "--logdir", os.path.join(options.logdir, "classifier"),
        "--export-dir", options.classifier_export, "--seed", str(options.seed),
        "--strategy", options.strategy, "--precision", options.precision,
    ]
    for name in ("train_tsv", "valid_tsv", "test_tsv"):
        if getattr(options, name):
            argv += [flag(name), getattr(options, name)]
    return argv
