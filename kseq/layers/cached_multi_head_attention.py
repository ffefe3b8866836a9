"""keras MultiHeadAttention with fused projections and a key/value cache."""

import keras
import tensorflow as tf
from keras import ops

from kseq.layers.masking import causal_mask
from kseq._shapes import dynamic_shape


@keras.saving.register_keras_serializable("kseq")
class CachedMultiHeadAttention(keras.layers.MultiHeadAttention):
    """Keras' MultiHeadAttention that projects in fewer, larger matmuls and can decode one step at a time.

    Same weights and arguments as the parent, whose `call` is unchanged.
    `attend_sequence` (what kseq's Transformer blocks call) projects a
    self-attention's queries, keys and values with one matmul against the
    three kernels side by side, and the keys and values of attention over
    another sequence with one: on a CPU a (tokens x D) @ (D x 3D) product
    and its gradients run faster per FLOP than three (D x D) ones (figures
    in benchmarks/RESULTS.md). Decoding steps keep separate projections.

    Decoding adds two things:
    - `project_memory`: keys/values of a fixed memory (the encoder outputs),
      projected once per source and reused at every step;
    - `cached_self_attention`: self-attention over a preallocated
      (B, H, L, D/H) key/value cache updated in place at `index`, so shapes
      stay fixed across steps (one trace, XLA-friendly).

    Example:
    >>> mha = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = keras.ops.ones((1, 3, 8))
    >>> tuple(mha(x, x).shape)
    (1, 3, 8)
    """

    @staticmethod
    def _scores(query, key):
        """(B, H, T, D/H) queries against (B, H, S, D/H) keys: (B, H, T, S)."""
        return ops.matmul(query, ops.swapaxes(key, -1, -2))

    def attend_sequence(self, query, value=None, attention_mask=None, training=None,
                        return_attention_scores=False):
        """Attends from `query` over `value`, or over itself, with fused projections.

        The same result as `self(query, value if value is not None else query,
        attention_mask=...)`; masks are explicit, not read from keras masks.

        Args:
            query: (B, T, D) queries.
            value: (B, S, D) sequence attended over, keys and values both.
                Defaults to None (self-attention over `query`).
            attention_mask: optional bool mask broadcasting to (B, T, S), True
                where a query may attend to a key. Defaults to None.
            training: whether attention dropout is active. Defaults to None.
            return_attention_scores: whether to return the weights too. Defaults to False.

        Returns:
            (B, T, D) outputs, or (outputs, (B, H, T, S) weights) when
            `return_attention_scores` is True.
        """
        if not self._can_fuse():
            value = query if value is None else value
            return self(query, value, attention_mask=attention_mask, training=training,
                        return_attention_scores=return_attention_scores)
        if value is None:
            query, key, value = self._project_heads_first(query, "query", "key", "value")
        else:
            (query,) = self._project_heads_first(query, "query")
            key, value = self._project_heads_first(value, "key", "value")
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        # Batched matmuls over (B, H, T, D/H): on a CPU they and their
        # gradients ran faster than keras' einsums (benchmarks/RESULTS.md).
        query = query * ops.cast(self._inverse_sqrt_key_dim, query.dtype)
        weights = self._masked_softmax(self._scores(query, key), attention_mask)
        output = ops.matmul(self._dropout_layer(weights, training=training), value)
        output = self._merge_heads(output)
        return (output, weights) if return_attention_scores else output

    def _masked_softmax(self, attention_scores, attention_mask=None):
        """keras' masked softmax (zero weight where masked, also on rows with
        nothing to attend to), computed in float32: under a mixed policy
        keras' Softmax layer would normalise in bfloat16 or float16."""
        dtype = attention_scores.dtype
        scores = ops.cast(attention_scores, "float32")
        if attention_mask is None:
            return ops.cast(ops.softmax(scores, axis=-1), dtype)
        mask = ops.cast(attention_mask, "bool")
        while len(mask.shape) < len(scores.shape):  # (B, T, S) -> (B, 1, T, S)
            mask = ops.expand_dims(mask, -3)
        weights = ops.softmax(ops.where(mask, scores, -1e9), axis=-1)
        return ops.cast(ops.where(mask, weights, 0.0), dtype)

    def _can_fuse(self):
        """Plain float kernels of one shape (no quantization, no LoRA)."""
        layers = (self._query_dense, self._key_dense, self._value_dense)
        return all(layer.quantization_mode is None and not layer.lora_enabled for layer in layers) \
            and len({tuple(layer.kernel.shape) for layer in layers}) == 1

    def _project_heads_first(self, x, *names):
        """(B, T, D) -> one (B, H, T, D/H) tensor per named projection: one
        (B*T, D) @ (D, n*H*D/H) matmul and one transpose for all n."""
        layers = [getattr(self, f"_{name}_dense") for name in names]
        batch, length, width = dynamic_shape(x)
        heads, head_dim = layers[0].kernel.shape[1:]
        kernels = [layer.kernel for layer in layers]
        kernel = ops.cast(kernels[0], x.dtype) if len(kernels) == 1 else _stacked(kernels, x.dtype, axis=1)
        projected = ops.matmul(ops.reshape(x, (-1, width)), ops.reshape(kernel, (width, -1)))
        has_bias = all(layer.bias is not None for layer in layers)
        bias = _stacked([layer.bias for layer in layers], x.dtype, axis=0) if has_bias else None
        projected = ops.reshape(projected, (batch, length, len(layers), heads, head_dim))
        if has_bias:
            projected = projected + bias
        return ops.unstack(ops.transpose(projected, (2, 0, 3, 1, 4)), len(layers))

    def _merge_heads(self, output):
        """(B, H, T, D/H) attention output -> (B, T, D) through the output
        projection, as one (B*T, D) @ (D, D) matmul."""
        batch, heads, length, head_dim = dynamic_shape(output)
        dense = self._output_dense
        merged = ops.reshape(ops.transpose(output, (0, 2, 1, 3)), (-1, heads * head_dim))
        kernel = ops.reshape(ops.cast(dense.kernel, merged.dtype), (heads * head_dim, -1))
        result = ops.matmul(merged, kernel)
        if dense.bias is not None:
            result = result + ops.cast(dense.bias, result.dtype)
        return ops.reshape(result, (batch, length, result.shape[-1]))

    def project_memory(self, value, key=None):
        """Projects a fixed memory's keys and values once, for `attend` to reuse.

        Args:
            value: (B, S, D) memory (the encoder outputs).
            key: optional (B, S, D) keys, if not the same as `value`. Defaults to None.

        Returns:
            {"key", "value"}: (B, H, S, D/H) each.
        """
        if key is None and self._can_fuse():
            key, value = self._project_heads_first(value, "key", "value")
            return {"key": key, "value": value}
        key, value = self._key_dense(value if key is None else key), self._value_dense(value)
        return {"key": _heads_first(key), "value": _heads_first(value)}

    def attend(self, query, memory, attention_mask=None, training=None, return_attention_scores=False):
        """Attends from queries over a memory already projected by `project_memory`.

        The parent's masked softmax and dropout, on head-major keys/values.

        Args:
            query: (B, T, D) queries.
            memory: {"key", "value"} of (B, H, S, D/H), from `project_memory`
                or a self-attention cache.
            attention_mask: optional bool mask broadcasting to (B, T, S), True
                where a query may attend to a key. Defaults to None.
            training: whether attention dropout is active. Defaults to None.
            return_attention_scores: whether to return the weights too. Defaults to False.

        Returns:
            (B, T, D) outputs, or (outputs, (B, H, T, S) weights) when
            `return_attention_scores` is True.
        """
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        if not self._can_fuse():
            query = self._query_dense(query) * ops.cast(self._inverse_sqrt_key_dim, query.dtype)
            scores = ops.einsum("bthd,bhsd->bhts", query, memory["key"])
            weights = self._masked_softmax(scores, attention_mask)
            output = ops.einsum("bhts,bhsd->bthd", self._dropout_layer(weights, training=training),
                                memory["value"])
            output = self._output_dense(output)
            return (output, weights) if return_attention_scores else output
        # As `attend_sequence`: plain and batched matmuls, which ran faster
        # than einsums at decoding's few rows a step too.
        (query,) = self._project_heads_first(query, "query")
        query = query * ops.cast(self._inverse_sqrt_key_dim, query.dtype)
        weights = self._masked_softmax(self._scores(query, memory["key"]), attention_mask)
        output = self._merge_heads(ops.matmul(self._dropout_layer(weights, training=training), memory["value"]))
        return (output, weights) if return_attention_scores else output

    def init_cache(self, batch_size, max_length=None):
        """Makes a zeroed self-attention cache for `cached_self_attention`.

        With `max_length` (an int), L = max_length positions, written in
        place at each step's index: fixed shapes, as XLA needs. Without it
        (inside a tf.function only), an empty cache of unknown length to which
        each step appends its keys/values: a step then copies, reorders and
        attends over the positions decoded so far, not over all L.

        Args:
            batch_size: B, the number of rows decoded together.
            max_length: L, the number of positions to allocate. Defaults to
                None (a growing cache).

        Returns:
            {"key", "value"} of (B, H, L, D/H) zeros in the layer's compute
            dtype (L = 0 and unknown for a growing cache).

        Raises:
            ValueError: if `max_length` is None outside a tf.function.
        """
        value_dim = self.value_dim or self.key_dim
        heads = self.num_heads
        if max_length is not None:
            return {
                "key": ops.zeros((batch_size, heads, max_length, self.key_dim), self.compute_dtype),
                "value": ops.zeros((batch_size, heads, max_length, value_dim), self.compute_dtype),
            }
        if tf.executing_eagerly():
            raise ValueError("A cache without `max_length` grows inside a tf.function only; pass `max_length`.")
        # The static length None is what marks the cache as growing.
        return {
            name: tf.compat.v1.placeholder_with_default(
                ops.zeros((batch_size, heads, 0, width), self.compute_dtype), (None, heads, None, width))
            for name, width in (("key", self.key_dim), ("value", value_dim))
        }

    def cached_self_attention(self, query, cache, index, training=None):
        """Runs causal self-attention for the next decoding steps, using and updating a cache.

        Writes the steps' keys/values into `cache` at `index` (an in-place
        dynamic-update-slice under XLA), or appends them to a growing cache
        (`init_cache` without `max_length`), and attends over cache positions
        <= each step's own.

        Args:
            query: (B, T, D) the steps at positions index .. index + T - 1.
            cache: {"key", "value"} of (B, H, L, D/H), from `init_cache` or a
                previous call.
            index: int or scalar tensor, the position of the first step.
            training: whether attention dropout is active. Defaults to None.

        Returns:
            (output, cache): (B, T, D) outputs and the updated cache.
        """
        # Separate projections: with a few rows per step, concatenating the
        # kernels at every step costs more than the one matmul saves (about
        # 5% slower greedy search at batch 32).
        new = {"key": _heads_first(self._key_dense(query)),
               "value": _heads_first(self._value_dense(query))}
        steps = dynamic_shape(query)[1]
        if cache["key"].shape[2] is None:
            cache = {name: ops.concatenate([cache[name], ops.cast(new[name], cache[name].dtype)], axis=2)
                     for name in ("key", "value")}
            # One step sees every position so far: no mask to build or apply.
            mask = None if query.shape[1] == 1 else causal_mask(steps, dynamic_shape(cache["key"])[2], index)
            return self.attend(query, cache, mask, training), cache
        cache = {
            name: ops.slice_update(
                cache[name], (0, 0, index, 0), ops.cast(new[name], cache[name].dtype)
            )
            for name in ("key", "value")
        }
        mask = causal_mask(steps, dynamic_shape(cache["key"])[2], index)
        return self.attend(query, cache, mask, training), cache


def _stacked(weights, dtype, axis):
    """The weights, each cast to `dtype`, stacked along `axis`."""
    return ops.stack([ops.cast(w, dtype) for w in weights], axis=axis)


def _heads_first(x):
    """(B, S, H, D/H) -> (B, H, S, D/H)."""
    return ops.transpose(x, (0, 2, 1, 3))
