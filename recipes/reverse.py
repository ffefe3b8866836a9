"""`python recipes/reverse.py ARGS` in a checkout runs `kseq-train reverse ARGS`
(the task is kseq/tasks/reverse.py)."""

import sys

from kseq.cli import train

if __name__ == "__main__":
    train.main(["reverse", *sys.argv[1:]])
