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
      (B, L, H, D/H) key/value cache updated in place at `index`, so shapes
      stay fixed across steps (one trace, XLA-friendly).

    Arguments are those of `keras.layers.MultiHeadAttention`.

    Example:
    >>> mha = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = keras.ops.ones((1, 3, 8))
    >>> tuple(mha(x, x).shape)
    (1, 3, 8)
    """

    def project_memory(self, value, key=None):
        """(B, S, D) memory -> {"key": (B, S, H, D/H), "value": (B, S, H, D/H)}."""
        key = value if key is None else key
        return {"key": self._key_dense(key), "value": self._value_dense(value)}

    def attend(self, query, memory, attention_mask=None, training=None):
        """Attention of (B, T, D) queries over projected `memory`.

        `attention_mask` broadcasts to (B, T, S); True means "may attend".
        """
        query = self._query_dense(query)  # (B, T, H, D/H)
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        output, _ = self._compute_attention(
            query, memory["key"], memory["value"], attention_mask, training
        )
        return self._output_dense(output)

    def init_cache(self, batch_size, max_length):
        """Zeroed self-attention cache: {"key", "value"} of (B, L, H, D/H)."""
        return {
            "key": ops.zeros(
                (batch_size, max_length, self.num_heads, self.key_dim),
                self.compute_dtype,
            ),
            "value": ops.zeros(
                (batch_size, max_length, self.num_heads, self.value_dim or self.key_dim),
                self.compute_dtype,
            ),
        }

    def cached_self_attention(self, query, cache, index, training=None):
        """Causal self-attention of the (B, T, D) steps at positions index.. .

        Writes their keys/values into `cache` at `index` and attends over
        cache positions <= each step's own. Returns (output, updated cache).
        """
        new = self.project_memory(query)
        cache = {
            name: ops.slice_update(
                cache[name], (0, index, 0, 0), ops.cast(new[name], cache[name].dtype)
            )
            for name in ("key", "value")
        }
        mask = causal_mask(ops.shape(query)[1], ops.shape(cache["key"])[1], index)
        return self.attend(query, cache, mask, training), cache
