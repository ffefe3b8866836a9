"""`python recipes/classify.py ARGS` in a checkout runs `kseq-train classify ARGS`
(the task is kseq/tasks/classify.py)."""

import sys

from kseq.cli import train

if __name__ == "__main__":
    train.main(["classify", *sys.argv[1:]])
