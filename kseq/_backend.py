"""The Keras backend kseq's code runs on: TensorFlow, checked before any of it loads.

kseq builds on tf.data, tf.function and SavedModel. `import kseq` chooses
the TensorFlow backend where the user chose none (KERAS_BACKEND); every
module of kseq that uses keras or TensorFlow imports this one first (each
subpackage's `__init__`, and the private modules beside them), so a user who
chose another backend gets one ImportError saying so at the first such
import, not an error from deep inside TensorFlow-only code.
"""

import os
import sys


def _refused(backend):
    return ImportError(f"kseq needs the Keras TensorFlow backend; KERAS_BACKEND is {backend!r}. "
                       "Set KERAS_BACKEND=tensorflow.")


# Before keras is imported: keras itself fails to import where the chosen
# backend's package is missing (jax not installed), with that package's
# error; the user's choice is what to name. Where keras is loaded already,
# its backend is fixed, whatever the variable says now.
_CHOSEN = os.environ.get("KERAS_BACKEND")
if _CHOSEN and _CHOSEN != "tensorflow" and "keras" not in sys.modules:
    raise _refused(_CHOSEN)

import keras  # noqa: E402

# An empty KERAS_BACKEND leaves the choice to ~/.keras/keras.json.
if keras.backend.backend() != "tensorflow":
    raise _refused(keras.backend.backend())
