"""Search strategies over a decoder step function."""

from kseq.decoding.greedy import greedy_search

__all__ = ["greedy_search"]
