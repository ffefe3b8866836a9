"""Dropout masks drawn from one random key a training step: how a
Transformer with compiled blocks drops (`TransformerSeq2Seq(compiled_blocks=True)`,
`kseq.layers.compiled_blocks`; nothing else uses it). The compiled function
takes the key as an argument, where keras' Dropout keeps a seed state."""

import tensorflow as tf

# TensorFlow's id of the Philox algorithm (what StatelessRandomGetKeyCounter
# makes keys for on CPUs and GPUs).
_PHILOX = 1


class StepDropout:
    """The dropout of one training step, in four ops a call forward and one
    backward.

    keras' Dropout advances its own seed state and derives a key at every
    call (eleven ops forward on a CPU, two backward). Here the model draws
    one seed a step and makes one Philox key of it; each call then draws
    its uniform noise from that key with its own counter, [0, n] for the
    n-th call of the step: Philox counters that differ in their high word
    never meet (a call would need 2^64 draws of four numbers), so the calls'
    masks are independent. `stream_of(s)` gives a dropout of the same key
    whose calls count [s, n], independent of this one's: a compiled function
    that takes the key and s draws in it (`kseq.layers.compiled_blocks`;
    XLA's Philox turns a key and counter into other bits than TensorFlow's
    kernel). Then one compare, one select of the scale
    1 / (1 - rate) or 0, and one multiply. Keep probability and scaling are
    keras' Dropout's (`u >= rate` on uniform noise in the inputs' dtype,
    kept values times 1 / (1 - rate) in that dtype); the masks themselves
    are other draws, and a dropped inf or NaN gives NaN (a multiply by 0),
    not keras' 0. Make one a step, inside the traced step, and call it in
    the same order at every trace: a call's counter is its position.

    Args:
        seed: (2,) int32 or int64 seed of the step, e.g. a keras
            SeedGenerator's `next()`; None where `key` is given.
        key: the (1,) uint64 Philox key of a seed, in place of `seed`.
        stream: the counters' high word, an int or a scalar integer tensor.
            Defaults to 0.

    Example:
    >>> dropout = StepDropout(tf.constant([1, 2], tf.int64))
    >>> y = dropout(tf.ones((2, 1000)), 0.25)
    >>> sorted(set(y.numpy().ravel().tolist()))
    [0.0, 1.3333333730697632]
    """

    def __init__(self, seed, key=None, stream=0) -> None:
        if key is None:
            key, _ = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
        self.key, self.stream = key, stream
        self.calls = 0

    def stream_of(self, stream):
        """A dropout of this one's key whose calls count in `stream`.

        Args:
            stream: an int or scalar integer tensor; 0 is this dropout's own.

        Returns:
            `StepDropout`.
        """
        return StepDropout(None, key=self.key, stream=stream)

    def __call__(self, inputs, rate):
        """`inputs` with each value kept with probability 1 - `rate` and then
        scaled by 1 / (1 - rate), else 0; `inputs` itself when `rate` is 0.

        Args:
            inputs: a float tensor.
            rate: a Python float in [0, 1).

        Returns:
            A tensor of the inputs' shape and dtype.
        """
        if not 0 <= rate < 1:
            raise ValueError(f"`rate` must be in [0, 1); got {rate!r}.")
        if rate == 0:
            return inputs
        counter = tf.stack([tf.cast(self.stream, tf.uint64), tf.constant(self.calls, tf.uint64)])
        self.calls += 1
        noise = tf.raw_ops.StatelessRandomUniformV2(
            shape=tf.shape(inputs), key=self.key, counter=counter, alg=_PHILOX, dtype=inputs.dtype)
        scale = tf.constant(1 / (1 - rate), inputs.dtype)
        return _scaled(inputs, tf.where(noise >= rate, scale, tf.zeros((), inputs.dtype)))


def _scaled(inputs, mask):
    """inputs * mask, whose gradient is upstream * mask: one op (autodiff
    would add a reduction for the broadcast it cannot rule out)."""

    @tf.custom_gradient
    def scaled(inputs):
        return inputs * mask, lambda upstream: upstream * mask

    return scaled(inputs)
