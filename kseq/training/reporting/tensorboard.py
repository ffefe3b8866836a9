"""TensorBoard summaries that Keras' TensorBoard callback does not write,
and the last step a run's event files hold."""

import glob
import os

import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api


def write_hparams(logdir, config):
    """Logs `config` (a flat dict) to the HParams tab as the settings of the
    run in `logdir`.

    They are written to the run's own folder, whose subfolders hold its
    curves (`train`, `validation`, `generation`, `test`): TensorBoard's
    HParams dashboard then lists those curves' last values as the run's
    metrics, so `tensorboard --logdir` over several runs' folders puts their
    settings and scores side by side. Values that are not bool, int, float
    or str are logged as strings.

    Args:
        logdir: the run's folder.
        config: {setting name: value}, flat.
    """
    values = {
        name: value if isinstance(value, (bool, int, float, str)) else str(value)
        for name, value in config.items()
    }
    with tf.summary.create_file_writer(logdir).as_default():
        hparams_api.hparams(values)


def write_scores(logdir, group, scores, step):
    """Logs scores as scalars of run `<logdir>/<group>`.

    E.g. the test scores at the end, which the HParams dashboard lists as
    metrics of the run.

    Args:
        logdir: the run's folder.
        group: the subfolder, such as "test".
        scores: {name: number}.
        step: the scalars' step.
    """
    writer = tf.summary.create_file_writer(f"{logdir}/{group}")
    with writer.as_default():
        for name, value in scores.items():
            tf.summary.scalar(name, float(value), step=step)
    writer.flush()


def write_model_graph(logdir, model):
    """Logs the inference graph of a seq2seq model to TensorBoard's Graphs tab.

    Keras only does so for functional models.

    Args:
        logdir: the run's folder; the graph goes to `<logdir>/graph`.
        model: a seq2seq model taking {"source_ids", "target_ids"}, (B, S)
            and (B, T) int32.
    """
    spec = tf.TensorSpec((None, None), tf.int32)
    traced = tf.function(
        lambda source, target: model({"source_ids": source, "target_ids": target}, training=False)
    ).get_concrete_function(spec, spec)
    writer = tf.summary.create_file_writer(f"{logdir}/graph")
    with writer.as_default():
        tf.summary.graph(traced.graph)
    writer.flush()


def last_step(folder, tag):
    """Finds the last step of a curve in the event files of a TensorBoard run.

    Read with TensorBoard's own reader, which stops at a record a killed
    process left half written.

    Args:
        folder: the run's folder, such as `<logdir>/train`.
        tag: the curve's tag, such as "loss".

    Returns:
        The largest step of `tag`'s points, an int; None where there is none.
    """
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps = [event.step for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*")))
             for event in EventFileLoader(path).Load() if any(value.tag == tag for value in event.summary.value)]
    return max(steps, default=None)
