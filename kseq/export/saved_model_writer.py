"""Writes a SavedModel of serving functions, the variables and the lookup
tables they use, and nothing of the Keras objects, so that TensorFlow alone
serves it.

Each signature is traced once. keras' `ExportArchive.write_out` traces every
endpoint twice: once to list the variables it reads, then again inside
`tf.saved_model.save`, because a trace made in a save context is cached apart
from one made outside it. A beam search's trace takes seconds, so the second
trace nearly doubles an export's time. Here the variables come from the
tracked models instead, and the only trace is the save's.
"""

import keras
import tensorflow as tf
from tensorflow.saved_model.experimental import TrackableResource

# Without the gradient functions of kseq's custom-gradient ops (layer norm,
# dropout, the loss): a servable is never differentiated (fine-tuning starts
# from a run's weights, `--init-from`), and they made an export slower to
# write and to load (benchmarks/export_time.py). kseq._saved_model's loader
# quiets the warning TensorFlow logs for them.
SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=False)


def write_saved_model(folder, endpoints, resources):
    """Writes `folder`, a SavedModel whose signatures are `endpoints`.

    Args:
        folder: where to write; it must not hold a SavedModel already.
        endpoints: {signature name: (function, input_signature)}, each
            input_signature a list of `tf.TensorSpec`. The first one also
            serves as `serving_default` unless one has that name.
        resources: the Keras layers and models whose variables the functions
            read, and the `tf.Module`s (tokenizers, tables) whose lookup tables
            and other TensorFlow resources they use. A function that reads a
            variable or table outside them fails the save with TensorFlow's
            error naming it.
    """
    root = tf.__internal__.tracking.AutoTrackable()
    # The TensorFlow variables the functions capture, not their Keras
    # wrappers: a Keras variable saves a copy of its own, which a TF1-style
    # loader (saved_model_cli, a Session) leaves unrestored. Under keras'
    # attribute names, so a loaded SavedModel offers `variables` and
    # `trainable_variables` as before.
    root.variables, root.trainable_variables, root.non_trainable_variables = [], [], []
    root._misc_assets = []
    for resource in resources:
        if isinstance(resource, keras.layers.Layer):
            root.variables += [variable.value for variable in resource.variables]
            root.trainable_variables += [variable.value for variable in resource.trainable_variables]
            root.non_trainable_variables += [variable.value for variable in resource.non_trainable_variables]
        root._misc_assets += _resources_under(resource)
    signatures = {}
    for name, (function, input_signature) in endpoints.items():
        traced = tf.function(function, input_signature=input_signature, autograph=False)
        setattr(root, name, traced)
        signatures[name] = traced
    signatures.setdefault("serving_default", next(iter(signatures.values())))
    tf.saved_model.save(root, folder, signatures=signatures, options=SAVE_OPTIONS)


def _resources_under(root):
    """The lookup tables and other TensorFlow resources reachable from `root`,
    walked as a SavedModel walks it (some objects list their tables only
    then)."""
    cache = {}

    class SavedModelView(tf.train.TrackableView):
        @classmethod
        def children(cls, obj, save_type="savedmodel", **kwargs):
            try:
                return super().children(obj, save_type, cache=cache)
            except TypeError as error:
                # A Keras layer's tf.function with required keyword arguments
                # cannot be listed from its input signature alone; such layers
                # hold variables, which are saved through the model, not tables.
                if "missing a required argument" not in str(error):
                    raise
                return {}

    return [trackable for trackable in SavedModelView(root).descendants()
            if isinstance(trackable, TrackableResource)]
