"""The tasks `kseq-train TASK` runs, one module each: its options (a
dataclass), its data, model, fit, test and export, read top to bottom.

Each module's `main(argv)` is the whole run; `kseq.cli.train` sets up the
process (TensorFlow's threads and allocator) before calling it. The other
way in, recipes/*.py in a checkout, wires the same layers and models with
plain Keras, one script a step from RNN to Transformer.
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)
