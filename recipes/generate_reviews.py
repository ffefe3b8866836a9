"""`python recipes/generate_reviews.py ARGS` in a checkout runs `kseq-train generate_reviews ARGS`
(the task is kseq/tasks/generate_reviews.py)."""

import sys

from kseq.cli import train

if __name__ == "__main__":
    train.main(["generate_reviews", *sys.argv[1:]])
