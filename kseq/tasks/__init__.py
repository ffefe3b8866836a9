"""The tasks `kseq-train TASK` runs, one module each: its options (a
dataclass), its data, model, fit, test and export, read top to bottom.

Each module's `main(argv)` is the whole run; `kseq.cli.train` sets up the
process (TensorFlow's threads and allocator) before calling it, and
`python recipes/<task>.py` in a checkout calls `kseq.cli.train` in turn.
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)
