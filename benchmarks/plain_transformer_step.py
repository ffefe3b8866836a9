"""The Transformer's train step written directly with TensorFlow ops, no keras:
the floor of what this math costs XLA (benchmarks/xla_compile.py).

The same math as kseq's recipe step (TransformerSeq2Seq with shared
embeddings): scaled token embedding plus sinusoidal positions, post-norm
encoder and decoder blocks with fused query/key/value projections, padding
and causal masks, ReLU feed-forward, output projection tied to the embedding,
label-smoothed cross-entropy over real tokens, one global gradient norm
clipped to 1, Adam (beta_2 0.98, epsilon 1e-9) on the Transformer schedule
with plain assigns. Dropout draws each site's mask from one Philox key a step
and a counter per site (no seed hashing per site).

With `shared_blocks`, every encoder layer calls ONE `tf.function` that takes
the layer's weights as arguments (the decoder layers another), so XLA could
compile a block once and reuse it.
"""

import math

import numpy as np
import tensorflow as tf

LABEL_SMOOTHING = 0.1
WARMUP_STEPS = 4000
BETA_1, BETA_2, EPSILON = 0.9, 0.98, 1e-9
ENCODER_WEIGHTS = ("qkv_kernel", "qkv_bias", "self_out_kernel", "self_out_bias", "norm_1_gamma", "norm_1_beta",
                   "ff_1_kernel", "ff_1_bias", "ff_2_kernel", "ff_2_bias", "norm_2_gamma", "norm_2_beta")
DECODER_WEIGHTS = ("qkv_kernel", "qkv_bias", "self_out_kernel", "self_out_bias", "norm_1_gamma", "norm_1_beta",
                   "cross_q_kernel", "cross_q_bias", "cross_kv_kernel", "cross_kv_bias", "cross_out_kernel",
                   "cross_out_bias", "norm_2_gamma", "norm_2_beta",
                   "ff_1_kernel", "ff_1_bias", "ff_2_kernel", "ff_2_bias", "norm_3_gamma", "norm_3_beta")


def sinusoidal_positions(length, depth):
    """(length, depth) float32 encodings: sin at even dimensions, cos at odd,
    wavelengths 10000^(2i / depth), as kseq's SinusoidalPositionEncoding."""
    dims = np.arange(depth)
    angles = np.arange(length)[:, None] * 10000.0 ** (-(dims - dims % 2) / depth)
    return np.where(dims % 2 == 0, np.sin(angles), np.cos(angles)).astype("float32")


def _shape_of(name, d, ff):
    kernels = {"qkv": (d, 3 * d), "self_out": (d, d), "cross_q": (d, d), "cross_kv": (d, 2 * d),
               "cross_out": (d, d), "ff_1": (d, ff), "ff_2": (ff, d)}
    stem, part = name.rsplit("_", 1)
    if part == "kernel":
        return kernels[stem]
    if part == "bias":
        return kernels[stem][1:]
    return (d,)  # a norm's gamma or beta


def _initial(name, shape, rng):
    if name.endswith("kernel"):
        limit = math.sqrt(6.0 / sum(shape))  # Glorot uniform, keras' Dense default
        return rng.uniform(-limit, limit, shape).astype("float32")
    return np.ones(shape, "float32") if name.endswith("gamma") else np.zeros(shape, "float32")


def dropout(x, rate, key, counter):
    """x with a fraction `rate` zeroed and the rest scaled by 1 / (1 - rate);
    the mask is Philox's output for `key` (uint64 [1]) from `counter` (uint64 [2])."""
    if not rate:
        return x
    uniform = tf.raw_ops.StatelessRandomUniformV2(shape=tf.shape(x), key=key, counter=counter, alg=1,
                                                  dtype=x.dtype)
    return tf.where(uniform >= rate, x / (1.0 - rate), tf.zeros_like(x))


def layer_norm(x, gamma, beta):
    mean, variance = tf.nn.moments(x, [-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + 1e-5) * gamma + beta


def dense(x, kernel, bias):
    """(B, T, in) @ (in, out) + bias as one 2-D matmul."""
    batch, length = tf.shape(x)[0], tf.shape(x)[1]
    y = tf.matmul(tf.reshape(x, (-1, x.shape[-1])), kernel) + bias
    return tf.reshape(y, (batch, length, kernel.shape[-1]))


def attention(query, key, value, mask, heads):
    """Scaled dot-product attention of (B, T, D) queries over (B, S, D)
    keys/values; `mask` (B, T, S) True where a query may attend."""
    def split(x):
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        return tf.transpose(tf.reshape(x, (batch, length, heads, x.shape[-1] // heads)), (0, 2, 1, 3))

    q, k, v = split(query), split(key), split(value)
    scores = tf.matmul(q * (q.shape[-1] ** -0.5), k, transpose_b=True)
    mask = mask[:, None]
    weights = tf.where(mask, tf.nn.softmax(tf.where(mask, scores, -1e9)), 0.0)
    out = tf.transpose(tf.matmul(weights, v), (0, 2, 1, 3))
    return tf.reshape(out, tf.shape(query))


def encoder_block(x, mask, weights, key, counter, rate, heads):
    """One post-norm encoder layer; `weights` in ENCODER_WEIGHTS order;
    dropout sites take `counter` + (0, 0) and + (0, 1)."""
    w = dict(zip(ENCODER_WEIGHTS, weights))
    q, k, v = tf.split(dense(x, w["qkv_kernel"], w["qkv_bias"]), 3, axis=-1)
    attended = dense(attention(q, k, v, mask, heads), w["self_out_kernel"], w["self_out_bias"])
    x = layer_norm(x + dropout(attended, rate, key, counter), w["norm_1_gamma"], w["norm_1_beta"])
    inner = tf.nn.relu(dense(x, w["ff_1_kernel"], w["ff_1_bias"]))
    fed = dropout(dense(inner, w["ff_2_kernel"], w["ff_2_bias"]), rate, key, counter + [0, 1])
    return layer_norm(x + fed, w["norm_2_gamma"], w["norm_2_beta"])


def decoder_block(y, memory, self_mask, cross_mask, weights, key, counter, rate, heads):
    """One post-norm decoder layer (causal self-attention, attention over
    `memory`, feed-forward); `weights` in DECODER_WEIGHTS order."""
    w = dict(zip(DECODER_WEIGHTS, weights))
    q, k, v = tf.split(dense(y, w["qkv_kernel"], w["qkv_bias"]), 3, axis=-1)
    attended = dense(attention(q, k, v, self_mask, heads), w["self_out_kernel"], w["self_out_bias"])
    y = layer_norm(y + dropout(attended, rate, key, counter), w["norm_1_gamma"], w["norm_1_beta"])
    q = dense(y, w["cross_q_kernel"], w["cross_q_bias"])
    k, v = tf.split(dense(memory, w["cross_kv_kernel"], w["cross_kv_bias"]), 2, axis=-1)
    crossed = dense(attention(q, k, v, cross_mask, heads), w["cross_out_kernel"], w["cross_out_bias"])
    y = layer_norm(y + dropout(crossed, rate, key, counter + [0, 1]), w["norm_2_gamma"], w["norm_2_beta"])
    inner = tf.nn.relu(dense(y, w["ff_1_kernel"], w["ff_1_bias"]))
    fed = dropout(dense(inner, w["ff_2_kernel"], w["ff_2_bias"]), rate, key, counter + [0, 2])
    return layer_norm(y + fed, w["norm_3_gamma"], w["norm_3_beta"])


class PlainTransformerStep:
    """The Transformer's variables and its train step in TensorFlow ops.

    Args:
        size: a train_step.py SIZES entry (layers, d, heads, ff, vocab,
            source, target, dropout).
        shared_blocks: each stack's layers call one `tf.function` (with
            `jit_compile=True`) that takes the layer's weights as arguments.
        seed: the initial weights' seed.
    """

    def __init__(self, size, shared_blocks=False, seed=0):
        self.size, self.shared_blocks = size, shared_blocks
        d, ff, vocab = size["d"], size["ff"], size["vocab"]
        rng = np.random.default_rng(seed)

        def variables(names, prefix):
            return [tf.Variable(_initial(name, _shape_of(name, d, ff), rng), name=f"{prefix}/{name}")
                    for name in names]

        self.embedding = tf.Variable(rng.normal(0, d**-0.5, (vocab, d)).astype("float32"), name="embedding")
        self.output_bias = tf.Variable(np.zeros(vocab, "float32"), name="output_bias")
        self.encoder = [variables(ENCODER_WEIGHTS, f"encoder_{i}") for i in range(size["layers"])]
        self.decoder = [variables(DECODER_WEIGHTS, f"decoder_{i}") for i in range(size["layers"])]
        self.trainable = [self.embedding, self.output_bias] + sum(self.encoder + self.decoder, [])
        self.moments = [tf.Variable(tf.zeros_like(v)) for v in self.trainable]
        self.velocities = [tf.Variable(tf.zeros_like(v)) for v in self.trainable]
        self.iterations = tf.Variable(0, dtype=tf.int64, name="iterations")
        self.positions = tf.constant(sinusoidal_positions(max(size["source"], size["target"]) + 1, d))
        self.encoder_block, self.decoder_block = encoder_block, decoder_block
        if shared_blocks:
            self.encoder_block = tf.function(encoder_block, jit_compile=True)
            self.decoder_block = tf.function(decoder_block, jit_compile=True)

    def embed(self, ids, key, counter):
        x = tf.gather(self.embedding, ids) * math.sqrt(self.size["d"])
        return dropout(x + self.positions[:tf.shape(ids)[1]], self.size["dropout"], key, counter)

    def logits(self, source_ids, target_ids, key):
        """(B, T, V) logits of the teacher-forced targets."""
        rate, heads = self.size["dropout"], self.size["heads"]

        def counter(site):  # distinct Philox counters: no two sites share a mask
            return tf.constant([0, 8 * site], tf.uint64)

        source_real, target_real = source_ids != 0, target_ids != 0
        # (B, queries, keys) masks: padded keys, and later targets, get no attention.
        encoder_mask = source_real[:, None, :] & tf.ones_like(source_real)[:, :, None]
        cross_mask = source_real[:, None, :] & tf.ones_like(target_real)[:, :, None]
        positions = tf.range(tf.shape(target_ids)[1])
        self_mask = target_real[:, None, :] & (positions[None, :] <= positions[:, None])[None]
        x = self.embed(source_ids, key, counter(0))
        for i, weights in enumerate(self.encoder):
            x = self.encoder_block(x, encoder_mask, [tf.convert_to_tensor(w) for w in weights], key,
                                   counter(2 + i), rate, heads)
        y = self.embed(target_ids, key, counter(1))
        for i, weights in enumerate(self.decoder):
            y = self.decoder_block(y, x, self_mask, cross_mask, [tf.convert_to_tensor(w) for w in weights], key,
                                   counter(2 + len(self.encoder) + i), rate, heads)
        return dense(y, tf.transpose(self.embedding), self.output_bias)

    def loss(self, labels, logits):
        """Label-smoothed cross-entropy averaged over the real (non-PAD) labels."""
        log_probs = tf.nn.log_softmax(logits)
        label_log_probs = tf.gather(log_probs, labels[..., None], batch_dims=2)[..., 0]
        per_token = -(1.0 - LABEL_SMOOTHING) * label_log_probs - LABEL_SMOOTHING * tf.reduce_mean(log_probs, -1)
        real = tf.cast(labels != 0, tf.float32)
        return tf.math.divide_no_nan(tf.reduce_sum(per_token * real), tf.reduce_sum(real))

    def train_step(self, source_ids, target_ids, labels):
        """One step: forward, gradient, global clip to norm 1, Adam. Returns the loss."""
        key = tf.reshape(tf.cast(self.iterations, tf.uint64), (1,))
        with tf.GradientTape() as tape:
            loss = self.loss(labels, self.logits(source_ids, target_ids, key))
        gradients, _ = tf.clip_by_global_norm(tape.gradient(loss, self.trainable), 1.0)
        step = tf.cast(self.iterations + 1, tf.float32)
        rate = self.size["d"] ** -0.5 * tf.minimum(step**-0.5, step * WARMUP_STEPS**-1.5)
        rate = rate * tf.sqrt(1.0 - BETA_2**step) / (1.0 - BETA_1**step)
        for variable, moment, velocity, gradient in zip(self.trainable, self.moments, self.velocities, gradients):
            gradient = tf.convert_to_tensor(gradient)
            moment.assign_add((gradient - moment) * (1.0 - BETA_1))
            velocity.assign_add((tf.square(gradient) - velocity) * (1.0 - BETA_2))
            variable.assign_sub(rate * moment / (tf.sqrt(velocity) + EPSILON))
        self.iterations.assign_add(1)
        return loss
