"""What the recipes share: argument checks and reading a user's TSV."""

import os


def check_paths(parser, config, files, folders=("logdir", "export_dir"), exports=("export_dir",)):
    """`parser.error` (exit 2 with usage) before any work, naming the option:

    - `files`: an input file that is missing, a directory or unreadable;
    - `folders`: an output folder path that exists as something else, or
      lies under a file;
    - `exports`: an export folder that is itself a SavedModel version (it
      holds `saved_model.pb`): exports go to `<folder>/<next version>/`,
      so the folder to pass is the one that holds the numbered versions.
    """
    for name in files:
        path = config.get(name)
        if not path:
            continue
        option = _option(name)
        if os.path.isdir(path):
            parser.error(f"{option} {path}: is a directory, not a file")
        if not os.path.isfile(path):
            parser.error(f"{option} {path}: no such file")
        if not os.access(path, os.R_OK):
            parser.error(f"{option} {path}: not readable (permission denied)")
    for name in folders:
        path = config.get(name)
        if not path:
            continue
        option = _option(name)
        if os.path.exists(path) and not os.path.isdir(path):
            parser.error(f"{option} {path} exists and is not a directory")
        blocker = _file_above(path)
        if blocker:
            parser.error(f"{option} {path}: {blocker} is a file, not a directory")
        if name in exports and os.path.isfile(os.path.join(path, "saved_model.pb")):
            parser.error(
                f"{option} {path} is itself a SavedModel version (it holds saved_model.pb); "
                f"pass the folder that holds the numbered versions, e.g. "
                f"{os.path.dirname(os.path.normpath(path)) or '.'}"
            )


def _option(name):
    return f"--{name.replace('_', '-')}"


def _file_above(path):
    """The nearest existing ancestor of `path` if it is not a directory."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return parent if parent and not os.path.isdir(parent) else None


def read_tsv_reporting(path, role):
    """A two-column TSV as two lists; bad lines are skipped and reported."""
    from kseq.data.tsv import format_problems, read_tsv

    first, second, problems = read_tsv(path)
    if problems:
        print(f"{role}: {format_problems(problems, path, total_lines=len(first) + len(problems))}")
    return first, second


def hold_out(first, second, every):
    """Parallel lists split into (kept, held out): every `every`-th item,
    from the first, is held out (a validation set when none is given)."""
    held = (first[::every], second[::every])
    kept = ([x for i, x in enumerate(first) if i % every], [y for i, y in enumerate(second) if i % every])
    return kept, held
