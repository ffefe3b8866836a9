"""`python recipes/translate.py ARGS` in a checkout runs `kseq-train translate ARGS`
(the task is kseq/tasks/translate.py)."""

import sys

from kseq.cli import train

if __name__ == "__main__":
    train.main(["translate", *sys.argv[1:]])
