"""Logit constraints every search applies."""

import tensorflow as tf

from kseq.special_ids import BOS_ID, PAD_ID
from kseq._shapes import dynamic_shape


def suppress_special_tokens(logits, token_ids=(PAD_ID, BOS_ID)):
    """Sets the logits of PAD and BOS to -inf: a search never emits them.

    PAD after EOS and no BOS in the output are part of the generate
    contract; without this an untrained or odd model could break it.

    Args:
        logits: (R, V) logits.
        token_ids: the ids to suppress. Default (PAD_ID, BOS_ID).

    Returns:
        (R, V) logits, those columns at -inf.
    """
    vocab = dynamic_shape(logits)[-1]
    banned = tf.reduce_any(
        tf.equal(tf.range(vocab)[:, None], tf.constant(token_ids, tf.int32)[None, :]), axis=1
    )
    # One (V,) row added to every row: a cheaper pass than a broadcast select.
    return logits + tf.where(banned, tf.cast(-float("inf"), logits.dtype), tf.zeros([], logits.dtype))


def repeated_ngram_tokens(history, index, size, vocab_size, max_count=1):
    """Finds the tokens that would repeat an n-gram of `size` tokens more often than `max_count` allows.

    Token v is banned for a row when the row's last size-1 tokens followed
    by v already occur in it `max_count` times (1: once, so never twice).
    Fixed shapes only (windows are static slices, bans one scatter), so
    searches keep compiling with XLA.

    Args:
        history: (R, L) ids, each row's generated tokens at positions 0..index-1.
        index: the position the token chosen now goes to.
        size: n, the n-gram's tokens.
        vocab_size: V.
        max_count: how many times an n-gram may occur. Default 1.

    Returns:
        (R, V) bool, True for a banned token.
    """
    matches, following = _ngram_matches(history, index, size)
    if matches is None:
        return tf.zeros([dynamic_shape(history)[0], vocab_size], tf.bool)
    return _ngram_counts(matches, following, vocab_size) >= max_count


def _ngram_matches(history, index, size):
    """((R, W) bool, (R, W) int32): for each window j of `size` tokens
    complete before `index`, whether its first size-1 tokens are the row's
    last size-1, and the token that ends it; (None, None) without windows."""
    windows = history.shape[1] - size + 1
    if size < 1 or windows < 1:
        return None, None
    # Window j (tokens j..j+size-1) counts once it is complete before `index`.
    complete = tf.range(windows)[None, :] + size - 1 < index
    matches = tf.broadcast_to(complete, [dynamic_shape(history)[0], windows])
    for offset in range(size - 1):
        suffix_token = tf.gather(history, tf.maximum(index - size + 1 + offset, 0), axis=1)
        matches &= tf.equal(history[:, offset:offset + windows], suffix_token[:, None])
    return matches, history[:, size - 1:]


def _ngram_counts(matches, following, vocab_size):
    """(R, V) int32: how often each token ends a matching window."""
    shape = dynamic_shape(matches)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], shape)
    indices = tf.stack([rows, following], axis=-1)
    return tf.scatter_nd(
        tf.reshape(indices, [-1, 2]), tf.reshape(tf.cast(matches, tf.int32), [-1]),
        tf.stack([shape[0], vocab_size]),
    )


def block_repeated_ngrams(logits, history, index, size, max_count=1):
    """Sets to -inf the logits of tokens that would repeat an n-gram of `size` more than `max_count` times.

    See `repeated_ngram_tokens`; steps where no row can ban anything skip
    the (R, V) passes.

    Args:
        logits: (R, V) logits.
        history: (R, L) ids, each row's generated tokens at positions 0..index-1.
        index: the position the token chosen now goes to.
        size: n, the n-gram's tokens; 0 changes nothing.
        max_count: how many times an n-gram may occur. Default 1.

    Returns:
        (R, V) logits.
    """
    matches, following = _ngram_matches(history, index, size) if size else (None, None)
    if matches is None:
        return logits

    def block():
        banned = _ngram_counts(matches, following, dynamic_shape(logits)[-1]) >= max_count
        return tf.where(banned, tf.cast(-float("inf"), logits.dtype), logits)

    # A token is banned once max_count windows end with it, so a row needs
    # that many matching windows; most steps of most rows have none: skip
    # the (R, V) passes then.
    possible = tf.reduce_sum(tf.cast(matches, tf.int32), axis=1) >= max_count
    return tf.cond(tf.reduce_any(possible), block, lambda: logits)


def source_length_limits(source_ids, limits, pad_id=PAD_ID):
    """Gives the most tokens each row may generate, EOS included, by its source length.

    A row's limit is ceil(ratio x its source tokens) + `length_slack`, at most `max_length`.

    Args:
        source_ids: (B, S) source ids.
        limits: a kseq.decoding.Limits with a `max_length_ratio`.
        pad_id: the id not counted as a source token. Default PAD_ID.

    Returns:
        (B,) int32.
    """
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, pad_id), tf.float32), axis=1)
    rows = tf.cast(tf.math.ceil(limits.max_length_ratio * lengths), tf.int32) + limits.length_slack
    return tf.minimum(rows, limits.max_length)


def apply_limits(logits, history, index, row_limits, limits):
    """Sets to -inf the logits of what `limits` forbids at this step.

    That is n-grams repeated too often (`block_repeated_ngrams`) and anything
    but EOS at a row's last allowed position (`end_rows_at_limits`).

    Args:
        logits: (R, V) logits.
        history: (R, L) ids, each row's generated tokens at positions 0..index-1.
        index: the position the token chosen now goes to.
        row_limits: (B,) int32, the most tokens each row may generate, or None.
        limits: the search's kseq.decoding.Limits.

    Returns:
        (R, V) logits.
    """
    logits = block_repeated_ngrams(logits, history, index, limits.no_repeat_ngram_size, limits.max_ngram_count)
    return end_rows_at_limits(logits, index, row_limits, limits.eos_id)


def end_rows_at_limits(logits, index, limits, eos_id):
    """Lets a row at its last allowed position (index + 1 >= its limit) emit only EOS.

    Args:
        logits: (R, V) logits, the rows of `limits` each repeated R / B times (beams).
        index: the position the token chosen now goes to.
        limits: (B,) int32, the most tokens each row may generate; None changes nothing.
        eos_id: the EOS id.

    Returns:
        (R, V) logits, all but EOS at -inf in rows at their limit.
    """
    if limits is None:
        return logits
    per_row = dynamic_shape(logits)[0] // dynamic_shape(limits)[0]
    at_limit = tf.repeat(index + 1 >= limits, per_row)

    def end():
        not_eos = tf.not_equal(tf.range(dynamic_shape(logits)[-1]), eos_id)
        banned = tf.logical_and(at_limit[:, None], not_eos[None, :])
        return tf.where(banned, tf.cast(-float("inf"), logits.dtype), logits)

    # Until some row reaches its limit nothing is banned: skip the (R, V) passes.
    return tf.cond(tf.reduce_any(at_limit), end, lambda: logits)
