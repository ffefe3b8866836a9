import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.layers import BahdanauAttention, CachedMultiHeadAttention, LuongAttention
from kseq.layers.masking import causal_mask
from support import assert_close


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 3, 4)).astype("float32")
    values = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    return query, values, mask


ATTENTIONS = [
    lambda: LuongAttention("dot"),
    lambda: LuongAttention("general"),
    lambda: LuongAttention("concat", units=6),
    lambda: BahdanauAttention(units=6),
]


@pytest.mark.parametrize("make", ATTENTIONS)
def test_weights_sum_to_one_and_skip_padding(make, inputs):
    query, values, mask = inputs
    context, weights = make()(query, values, padding_mask=mask)
    weights = np.asarray(weights)
    assert weights.shape == (2, 3, 5)
    assert_close(weights.sum(-1), np.ones((2, 3)))
    assert np.all(weights[0, :, 3:] == 0.0)
    assert np.all(weights[1] > 0.0)
    assert_close(context, weights @ values)


def test_luong_dot_golden(inputs):
    query, values, mask = inputs
    _, weights = LuongAttention("dot")(query, values, padding_mask=mask)
    scores = query @ values.transpose(0, 2, 1)
    scores[0, :, 3:] = -np.inf
    assert_close(weights, softmax(scores))


def test_luong_general_golden(inputs):
    query, values, _ = inputs
    layer = LuongAttention("general")
    layer(query, values)
    layer.memory_dense.kernel.assign(2.0 * np.eye(4))
    _, weights = layer(query, values)
    assert_close(weights, softmax(2.0 * query @ values.transpose(0, 2, 1)))


@pytest.mark.parametrize("make", [lambda: LuongAttention("concat", units=3), lambda: BahdanauAttention(3)])
def test_additive_score_golden(make, inputs):
    query, values, _ = inputs
    layer = make()
    layer(query, values)
    w_q = np.arange(12, dtype="float32").reshape(4, 3) / 10
    w_k = -np.arange(12, dtype="float32").reshape(4, 3) / 20
    v = np.array([[1.0], [-2.0], [0.5]], "float32")
    layer.query_dense.kernel.assign(w_q)
    layer.memory_dense.kernel.assign(w_k)
    layer.score_dense.kernel.assign(v)
    _, weights = layer(query, values)
    hidden = np.tanh((query @ w_q)[:, :, None] + (values @ w_k)[:, None])
    assert_close(weights, softmax((hidden @ v)[..., 0]))


def test_attention_argument_errors(inputs):
    query, values, _ = inputs
    with pytest.raises(ValueError, match="`score` must be one of"):
        LuongAttention("cosine")
    with pytest.raises(ValueError, match="same width"):
        LuongAttention("dot")(query, values[..., :3])
    with pytest.raises(ValueError, match="`units`"):
        BahdanauAttention(0)


def test_multi_head_attention_matches_keras_causal_reference():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    ours = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    reference = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    ours(x, x)
    reference(x, x)
    reference.set_weights(ours.get_weights())
    mask = np.asarray(causal_mask(6, 6))[None]
    expected = reference(x, x, use_causal_mask=True)
    assert_close(ours(x, x, attention_mask=mask), expected)
    # Token by token through the preallocated cache: the same outputs.
    cache = ours.init_cache(2, 10)
    steps = []
    for t in range(6):
        out, cache = ours.cached_self_attention(x[:, t : t + 1], cache, t)
        steps.append(out)
    assert_close(np.concatenate(steps, 1), expected)
    assert cache["key"].shape == (2, 2, 10, 4)  # (B, H, L, D/H)
    assert np.all(np.asarray(cache["key"])[:, :, 6:] == 0)
    assert np.all(np.asarray(cache["key"])[:, :, :6] != 0)


def test_multi_head_memory_projection_reuse():
    rng = np.random.default_rng(2)
    query = rng.normal(size=(2, 3, 8)).astype("float32")
    memory = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.ones((2, 3, 5), bool)
    mask[0, :, 4] = False
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    expected = layer(query, memory, attention_mask=mask)
    assert_close(layer.attend(query, layer.project_memory(memory), mask), expected)


@pytest.mark.parametrize("cross", [False, True])
def test_fused_projections_equal_the_parent_call_and_its_gradients(cross):
    """`attend_sequence` (one matmul for Q, K, V, or for K, V) gives keras'
    MultiHeadAttention outputs, weights and gradients for the same kernels."""
    rng = np.random.default_rng(3)
    query = tf.constant(rng.normal(size=(2, 4, 8)).astype("float32"))
    memory = tf.constant(rng.normal(size=(2, 5, 8)).astype("float32")) if cross else query
    mask = np.ones((2, 4, memory.shape[1]), bool)
    mask[1, :, -1] = False
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    layer(query, memory)
    for weight in layer.weights:  # non-zero biases, so a misplaced bias shows
        weight.assign(rng.normal(size=weight.shape).astype("float32"))

    def run(fused):
        with tf.GradientTape() as tape:
            tape.watch([query, memory])
            if fused:
                out, weights = layer.attend_sequence(query, memory if cross else None, mask,
                                                     return_attention_scores=True)
            else:
                out, weights = layer(query, memory, attention_mask=mask, return_attention_scores=True)
            loss = tf.reduce_sum(out * np.arange(8, dtype="float32"))
        return [out, weights] + tape.gradient(loss, [query, memory] + layer.trainable_weights)

    fused, reference = run(True), run(False)
    # float32 sums in another order, so a tolerance relative to the largest
    # entry (the key bias' gradient is zero in exact arithmetic: roundoff only).
    scale = max(float(np.max(np.abs(t))) for t in reference)
    for got, expected in zip(fused, reference):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-6 * scale)


def test_fused_projections_fall_back_when_kernels_differ():
    """value_dim != key_dim: the kernels cannot sit side by side."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4, value_dim=3)
    expected = layer(x, x)
    assert not layer._can_fuse()
    assert_close(layer.attend_sequence(x), expected)


def test_fused_attention_equals_keras_dot_product_attention_which_tensorflow_cannot_fuse(inputs):
    # Issue 31 asked for keras.ops.dot_product_attention where it applies, for
    # cuDNN's flash attention on a GPU. On the TensorFlow backend that op is
    # the same explicit computation (XLA also dropped its cuDNN attention
    # rewrite), so kseq keeps its head-major path, which equals it.
    query, values, mask = inputs
    mha = CachedMultiHeadAttention(num_heads=2, key_dim=3)
    mha(query, values)
    masks = np.broadcast_to(mask[:, None, :], (2, 3, 5))
    fused = mha.attend_sequence(query, values, attention_mask=masks)
    (q,), (k, v) = mha._project_heads_first(query, "query"), mha._project_heads_first(values, "key", "value")
    to_btnh = lambda x: keras.ops.transpose(x, (0, 2, 1, 3))  # noqa: E731
    keras_output = keras.ops.dot_product_attention(to_btnh(q), to_btnh(k), to_btnh(v), mask=masks[:, None])
    assert_close(fused, mha._merge_heads(to_btnh(keras_output)))
    if keras.backend.backend() == "tensorflow":
        with pytest.raises(ValueError, match="not supported in tensorflow"):
            keras.ops.dot_product_attention(to_btnh(q), to_btnh(k), to_btnh(v), flash_attention=True)
