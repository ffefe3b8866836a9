"""Decoder state along the beams: tiling a row's state for its beams and
reordering rows when beams change parents."""

import tensorflow as tf


def tile_beams(state, beam_size):
    """Repeats every row of every tensor in `state` `beam_size` times, the beams of a row side by side.

    Args:
        state: a nest of (B, ...) tensors.
        beam_size: the beams per row.

    Returns:
        The same nest of (B * beam_size, ...) tensors.
    """
    return tf.nest.map_structure(lambda t: tf.repeat(t, beam_size, axis=0), state)


def gather_beams(state, indices):
    """Reorders the rows of the state, the default way: row i of the result is row indices[i].

    Args:
        state: a nest of (R, ...) tensors.
        indices: (R',) int32 rows to take.

    Returns:
        The same nest of (R', ...) tensors.
    """
    return tf.nest.map_structure(lambda t: tf.gather(t, indices), state)
