"""Decoder state along the beams: tiling a row's state for its beams and
reordering rows when beams change parents."""

import tensorflow as tf


def tile_beams(state, beam_size):
    """Repeats every row of every tensor in `state` `beam_size` times:
    (B, ...) -> (B * beam_size, ...), the beams of a row side by side."""
    return tf.nest.map_structure(lambda t: tf.repeat(t, beam_size, axis=0), state)


def gather_beams(state, indices):
    """Default state reordering: row i of the result is row indices[i]."""
    return tf.nest.map_structure(lambda t: tf.gather(t, indices), state)
