"""`python recipes/caption.py ARGS` in a checkout runs `kseq-train caption ARGS`
(the task is kseq/tasks/caption.py)."""

import sys

from kseq.cli import train

if __name__ == "__main__":
    train.main(["caption", *sys.argv[1:]])
