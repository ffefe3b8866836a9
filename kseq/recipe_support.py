"""What the recipes share: argument checks and reading a user's TSV."""

import os


def check_paths(parser, config, files, folders=("logdir", "export_dir")):
    """`parser.error` (exit 2 with usage) for a missing input file, or an
    output folder path that exists as something else."""
    for name in files:
        path = config.get(name)
        if path and not os.path.isfile(path):
            parser.error(f"--{name.replace('_', '-')} {path}: no such file")
    for name in folders:
        if os.path.exists(config[name]) and not os.path.isdir(config[name]):
            parser.error(f"--{name.replace('_', '-')} {config[name]} exists and is not a directory")


def read_tsv_reporting(path, role):
    """A two-column TSV as two lists; bad lines are skipped and reported."""
    from kseq.data.tsv import format_problems, read_tsv

    first, second, problems = read_tsv(path)
    if problems:
        print(f"{role}: {format_problems(problems, path, total_lines=len(first) + len(problems))}")
    return first, second
