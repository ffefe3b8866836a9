"""keras MultiHeadAttention with reusable projections and a key/value cache."""

import keras
from keras import ops

from kseq.layers.masking import causal_mask


@keras.saving.register_keras_serializable("kseq")
class CachedMultiHeadAttention(keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` that can decode one step at a time.

    Training uses the parent's `call` unchanged (its fused
    `keras.ops.dot_product_attention` path when attention dropout is 0).
    Decoding adds two things:
    - `project_memory`: keys/values of a fixed memory (the encoder outputs),
      projected once per source and reused at every step;
    - `cached_self_attention`: self-attention over a preallocated
      (B, H, L, D/H) key/value cache updated in place at `index`, so shapes
      stay fixed across steps (one trace, XLA-friendly).

    Arguments are those of `keras.layers.MultiHeadAttention`.

    Example:
    >>> mha = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = keras.ops.ones((1, 3, 8))
    >>> tuple(mha(x, x).shape)
    (1, 3, 8)
    """

    def project_memory(self, value, key=None):
        """(B, S, D) memory -> {"key", "value"}: (B, H, S, D/H) each."""
        key = value if key is None else key
        return {
            "key": _heads_first(self._key_dense(key)),
            "value": _heads_first(self._value_dense(value)),
        }

    def attend(self, query, memory, attention_mask=None, training=None):
        """Attention of (B, T, D) queries over projected `memory`.

        `attention_mask` broadcasts to (B, T, S); True means "may attend".
        The parent's masked softmax and dropout, on head-major keys/values.
        """
        query = self._query_dense(query) * ops.cast(self._inverse_sqrt_key_dim, query.dtype)
        scores = ops.einsum("bthd,bhsd->bhts", query, memory["key"])
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        weights = self._masked_softmax(scores, attention_mask)
        weights = self._dropout_layer(weights, training=training)
        output = ops.einsum("bhts,bhsd->bthd", weights, memory["value"])
        return self._output_dense(output)

    def init_cache(self, batch_size, max_length):
        """Zeroed self-attention cache: {"key", "value"} of (B, H, L, D/H)."""
        value_dim = self.value_dim or self.key_dim
        return {
            "key": ops.zeros((batch_size, self.num_heads, max_length, self.key_dim), self.compute_dtype),
            "value": ops.zeros((batch_size, self.num_heads, max_length, value_dim), self.compute_dtype),
        }

    def cached_self_attention(self, query, cache, index, training=None):
        """Causal self-attention of the (B, T, D) steps at positions index.. .

        Writes their keys/values into `cache` at `index` (an in-place
        dynamic-update-slice under XLA) and attends over cache positions <=
        each step's own. Returns (output, updated cache).
        """
        new = self.project_memory(query)
        cache = {
            name: ops.slice_update(
                cache[name], (0, 0, index, 0), ops.cast(new[name], cache[name].dtype)
            )
            for name in ("key", "value")
        }
        mask = causal_mask(ops.shape(query)[1], ops.shape(cache["key"])[2], index)
        return self.attend(query, cache, mask, training), cache


def _heads_first(x):
    """(B, S, H, D/H) -> (B, H, S, D/H)."""
    return ops.transpose(x, (0, 2, 1, 3))
