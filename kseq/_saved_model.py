"""Loading one of kseq's SavedModels with TensorFlow alone.

Apart from kseq.export (which writes them, with keras and the models): the
commands load an export and serve it with TensorFlow and tensorflow_text
only, and need none of kseq's model code loaded to do so.
"""

import logging

import tensorflow as tf


class _WithoutGradientNotice(logging.Filter):
    """Drops TensorFlow's "Importing a function ... with ops with unsaved
    custom gradients" warning, logged once a function of an export written
    without its custom gradients (seven for a translator), as kseq's are
    (kseq.export.saved_model_writer.SAVE_OPTIONS)."""

    def filter(self, record):
        return "with ops with unsaved custom gradients" not in record.getMessage()


def load_saved_model(folder):
    """`tf.saved_model.load(folder)` without the warnings of the gradients
    kseq's exports leave out: kseq's own loads serve, and never ask for a
    gradient.

    Args:
        folder: a SavedModel folder.

    Returns:
        The loaded object.
    """
    notice = _WithoutGradientNotice()
    logger = logging.getLogger("absl")
    logger.addFilter(notice)
    try:
        return tf.saved_model.load(folder)
    finally:
        logger.removeFilter(notice)
