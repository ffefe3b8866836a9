"""Greedy search over a step function."""

import tensorflow as tf

from kseq.decoding.constraints import suppress_special_tokens
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID


def greedy_search(step_fn, state, batch_size, max_length, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    """Picks the most likely token at every step until EOS or `max_length`.

    All in TensorFlow ops (one `tf.while_loop` with fixed-shape loop
    variables), so it traces once inside a `tf.function` and exports.

    Args:
        step_fn: `(token_ids (B,), state, index) -> (logits (B, V), state)`;
            `index` is the position of `token_ids` (0 for BOS).
        state: the decoder state from the model's `initial_state`.
        batch_size: B (int or scalar tensor).
        max_length: the most tokens to generate (a Python int).

    Returns:
        (B, T') int32 ids, T' <= max_length: no BOS, EOS kept, PAD after EOS
        (PAD and BOS are never chosen as tokens).
        The loop stops as soon as every row has emitted EOS.
    """
    tokens = tf.fill([batch_size], tf.constant(bos_id, tf.int32))
    finished = tf.zeros([batch_size], tf.bool)
    output = tf.fill([batch_size, max_length], tf.constant(pad_id, tf.int32))

    def keep_going(index, tokens, finished, output, state):
        return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(index, tokens, finished, output, state):
        logits, state = step_fn(tokens, state, index)
        next_tokens = tf.argmax(suppress_special_tokens(logits), axis=-1, output_type=tf.int32)
        next_tokens = tf.where(finished, pad_id, next_tokens)
        output = tf.tensor_scatter_nd_update(
            output,
            tf.stack([tf.range(batch_size), tf.fill([batch_size], index)], axis=1),
            next_tokens,
        )
        finished = tf.logical_or(finished, tf.equal(next_tokens, eos_id))
        return index + 1, next_tokens, finished, output, state

    steps, _, _, output, _ = tf.while_loop(
        keep_going, body, (tf.constant(0), tokens, finished, output, state)
    )
    return output[:, :steps]
