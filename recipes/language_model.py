"""`python recipes/language_model.py ARGS` in a checkout runs `kseq-train language_model ARGS`
(the task is kseq/tasks/language_model.py)."""

import sys

from kseq.cli import train

if __name__ == "__main__":
    train.main(["language_model", *sys.argv[1:]])
