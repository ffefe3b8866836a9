"""Argument checks that fail early with a message naming the argument.

Every public entry point runs its inputs through these so that a user sees
"`source_ids` must ..." instead of a TensorFlow trace from deep inside a graph.
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

import keras
import numpy as np
import tensorflow as tf


def check_choice(name, value, choices):
    """Checks that `value` is one of `choices`.

    Args:
        name: the argument's name, for the message.
        value: the value to check.
        choices: the allowed values.

    Returns:
        `value`, unchanged.

    Raises:
        ValueError: `value` is not one of `choices`.
    """
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {list(choices)}; got {value!r}."
        )
    return value


def check_positive_int(name, value, allow_zero=False):
    """Checks that `value` is an integer > 0 (or >= 0).

    Args:
        name: the argument's name, for the message.
        value: the value to check; a bool is not an integer here.
        allow_zero: accept 0 too. Default False.

    Returns:
        `value` as a Python int.

    Raises:
        ValueError: `value` is not an integer or is below the bound.
    """
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"`{name}` must be an integer; got {value!r}.")
    if value < low:
        raise ValueError(f"`{name}` must be >= {low}; got {value}.")
    return int(value)


def check_rate(name, value):
    """Checks that `value` is a rate in [0, 1), such as a dropout rate.

    Args:
        name: the argument's name, for the message.
        value: the value to check, an int or float.

    Returns:
        `value` as a float.

    Raises:
        ValueError: `value` is not a number in [0, 1).
    """
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1); got {value!r}.")
    return float(value)


def as_id_array(ids, name):
    """Turns Python lists of ids into a numpy array; anything else is returned as is.

    Args:
        ids: a list or tuple of id rows, or an array or tensor.
        name: the argument's name, for the message.

    Returns:
        A numpy array for a list or tuple, else `ids` unchanged.

    Raises:
        ValueError: the rows have different lengths.
    """
    if not isinstance(ids, (list, tuple)):
        return ids
    try:
        array = np.asarray(ids)
    except ValueError:
        array = np.asarray(ids, dtype=object)
    if array.dtype == object:
        raise ValueError(
            f"`{name}` must be a rectangular (batch, length) array; pad "
            "sequences of different lengths with kseq.PAD_ID (0)."
        )
    return array


def check_token_ids(ids, name, vocab_size=None, max_length=None):
    """Checks a (B, L) batch of token ids and returns it as an int32 tensor.

    Static properties (dtype, rank, empty or over-long length) raise
    ValueError at once. Id ranges raise ValueError when called eagerly; inside
    a traced function they become runtime assertions with the same message.

    Args:
        ids: (B, L) integer ids: an array, tensor or list of equal-length rows.
        name: the argument's name, for the message.
        vocab_size: ids must lie in [0, vocab_size); None (default) skips
            the range check.
        max_length: the longest L allowed; None (default) for any.

    Returns:
        The ids as an int32 tensor; a symbolic Keras tensor is returned
        unchanged.

    Raises:
        ValueError: `ids` is ragged or sparse, not integer, not rank 2,
            empty, longer than `max_length`, or (eagerly) out of range.
    """
    symbolic = isinstance(ids, keras.KerasTensor)
    if isinstance(ids, (tf.RaggedTensor, tf.SparseTensor)):
        raise ValueError(
            f"`{name}` must be a dense (batch, length) tensor; got a "
            f"{type(ids).__name__}. Pad it with kseq.PAD_ID (0), e.g. "
            "`ids.to_tensor()`."
        )
    ids = as_id_array(ids, name)
    if not hasattr(ids, "dtype"):
        raise ValueError(
            f"`{name}` must be an integer array or tensor of shape "
            f"(batch, length); got {type(ids).__name__}."
        )
    _check_id_shape(ids, name, max_length)
    if symbolic:
        return ids
    if vocab_size is None:
        return tf.cast(ids, "int32")
    # Ranges are checked before the cast to int32, which would wrap an int64
    # id of 2**32 + 5 around to 5.
    message = f"`{name}` must hold ids in [0, {vocab_size})"
    if tf.executing_eagerly():
        if tf.size(ids) > 0:
            low, high = int(tf.reduce_min(ids)), int(tf.reduce_max(ids))
            if low < 0 or high >= vocab_size:
                raise ValueError(f"{message}; got ids from {low} to {high}.")
        return tf.cast(ids, "int32")
    return ids_in_range(ids, vocab_size, message)


def _check_id_shape(ids, name, max_length):
    """Raises ValueError, naming `name`, for ids that are not integer, not
    (B, L), empty, or longer than `max_length` (None: any length)."""
    dtype = keras.backend.standardize_dtype(ids.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"`{name}` must hold integer token ids (int32 or int64); got "
            f"dtype {dtype}."
        )
    shape = tuple(ids.shape)
    if len(shape) != 2:
        raise ValueError(
            f"`{name}` must have rank 2, shape (batch, length); got shape "
            f"{shape}."
        )
    if shape[1] == 0:
        raise ValueError(f"`{name}` is empty: its length axis has size 0.")
    if max_length is not None and shape[1] is not None and shape[1] > max_length:
        raise ValueError(
            f"`{name}` has length {shape[1]}, over the model's max_length "
            f"{max_length}; truncate the inputs or build the model with a "
            "larger max_length."
        )


def ids_in_range(ids, size, message):
    """Clips ids into [0, size), asserting that they were in range, for traced functions.

    The assertion is a side effect nothing waits for: a train step on a GPU
    would otherwise stall on copying its condition to the host before every
    gather (tests/training/test_train_step_graph.py). Clipping keeps the gathers that run meanwhile in
    range (an id out of range fails deep inside TensorFlow on a CPU and reads
    zeros on a GPU), and the step still ends with `message`. Under XLA the
    assertion compiles to nothing, as every assertion does.

    Args:
        ids: an integer tensor of ids, any shape.
        size: the number of valid ids (an int or scalar tensor).
        message: what the assertion fails with: a string, or a list of
            strings and int32 tensors.

    Returns:
        `ids` as int32, clipped into [0, size).
    """
    wide = tf.cast(ids, "int64")
    size = tf.cast(size, "int64")
    in_range = tf.reduce_all((wide >= 0) & (wide < size))
    # Strings and int32 data only: anything else would guard the assertion
    # with a tf.cond, whose predicate a GPU must also send to the host.
    tf.debugging.Assert(in_range, message if isinstance(message, list) else [message])
    return clipped_ids(wide, size)


def clipped_ids(ids, size):
    """Clips ids into [0, size) without asserting anything.

    Args:
        ids: an integer tensor of ids, any shape.
        size: the number of valid ids (an int or scalar tensor).

    Returns:
        `ids` as int32, clipped into [0, size).
    """
    return tf.cast(tf.clip_by_value(tf.cast(ids, "int64"), 0, tf.cast(size, "int64") - 1), "int32")


def check_float(name, value, low=None, high=None, low_open=False):
    """Checks that `value` is a finite number in [low, high] (or (low, high]).

    Args:
        name: the argument's name, for the message.
        value: the value to check; a bool is not a number here.
        low: the lower bound; None (default) for none.
        high: the upper bound, inclusive; None (default) for none.
        low_open: exclude `low` itself. Default False.

    Returns:
        `value` as a float.

    Raises:
        ValueError: `value` is not a finite number within the bounds.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise ValueError(f"`{name}` must be a number; got {value!r}.")
    value = float(value)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if not np.isfinite(value) or too_low or too_high:
        left = "(" if low_open else "["
        bounds = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise ValueError(f"`{name}` must be a finite number in {bounds}; got {value!r}.")
    return value
