"""Padding and causal masks, merged in one place.

All masks are boolean with True meaning "may attend / is a real token".
Shapes: B batch, T queries, S keys.
"""

from keras import ops

from kseq.special_ids import PAD_ID
from kseq._shapes import dynamic_shape


def padding_mask(token_ids):
    """Marks which token ids are real tokens rather than padding.

    Args:
        token_ids: (B, S) integer token ids.

    Returns:
        (B, S) bool, True at real tokens and False at PAD.
    """
    return ops.not_equal(token_ids, PAD_ID)


def causal_mask(query_length, key_length, offset=0):
    """Builds the mask that lets each query see only keys at or before its position.

    Args:
        query_length: T, the number of queries.
        key_length: S, the number of keys.
        offset: position of the first query (cached decoding). Defaults to 0.

    Returns:
        (T, S) bool, True where key s <= query t + offset.
    """
    queries = ops.expand_dims(ops.arange(query_length) + offset, 1)
    keys = ops.expand_dims(ops.arange(key_length), 0)
    return ops.less_equal(keys, queries)


def attention_mask(key_padding_mask, query_length, causal=False, offset=0):
    """Merges a key padding mask (B, S) with causality into one (B, T, S) mask.

    Args:
        key_padding_mask: (B, S) bool, True at real keys.
        query_length: T, the number of queries.
        causal: whether query t may only see keys s <= t + offset. Defaults to False.
        offset: position of the first query (cached decoding). Defaults to 0.

    Returns:
        (B, T, S) bool, True where query t may attend to key s.
    """
    key_padding_mask = ops.cast(key_padding_mask, "bool")
    mask = ops.expand_dims(key_padding_mask, 1)  # (B, 1, S)
    shape = dynamic_shape(key_padding_mask)
    mask = ops.broadcast_to(mask, (shape[0], query_length, shape[1]))
    if causal:
        mask = ops.logical_and(mask, causal_mask(query_length, shape[1], offset))
    return mask


def masked_softmax(scores, mask=None):
    """Softmax over the last axis giving exactly zero weight where mask is False.

    Computed in float32 (returned in the scores' dtype), so that mixed
    precision never normalises in bfloat16 or float16. A row with no allowed
    key (an all-PAD source) gets uniform weights instead of NaN; such rows
    are padding themselves and never reach a loss.

    Args:
        scores: (..., S) unnormalised scores, e.g. (B, T, S).
        mask: optional bool mask broadcastable to `scores`, True where a key
            may get weight. Defaults to None (no mask).

    Returns:
        Weights of the scores' shape and dtype, summing to 1 over the last axis.
    """
    dtype = scores.dtype
    scores = ops.cast(scores, "float32")
    if mask is not None:
        scores = ops.where(mask, scores, -1e9)
    return ops.cast(ops.softmax(scores, axis=-1), dtype)


def reverse_real_steps(x, mask):
    """Reverses each row's real steps in place, leaving right padding as is.

    [[5, 6, 7, 0, 0]] -> [[7, 6, 5, 0, 0]]. Applying it twice is the identity.

    Args:
        x: (B, S) or (B, S, ...) tensor to reverse along axis 1.
        mask: (B, S) bool, True at real steps.

    Returns:
        A tensor of x's shape with each row's real steps reversed.
    """
    length = ops.sum(ops.cast(mask, "int32"), axis=1, keepdims=True)  # (B, 1)
    shape = dynamic_shape(x)
    positions = ops.expand_dims(ops.arange(shape[1]), 0)
    source = ops.where(positions < length, length - 1 - positions, positions)
    for _ in range(len(x.shape) - 2):
        source = ops.expand_dims(source, -1)
    source = ops.broadcast_to(source, shape)
    return ops.take_along_axis(x, source, axis=1)
