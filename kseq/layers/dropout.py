"""Dropout masks drawn from one random key a training step (the GPU path)."""

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
    masks are independent. Then one compare, one select of the scale
    1 / (1 - rate) or 0, and one multiply. Keep probability and scaling are
    keras' Dropout's (`u >= rate` on uniform noise in the inputs' dtype,
    kept values times 1 / (1 - rate) in that dtype); the masks themselves
    are other draws, and a dropped inf or NaN gives NaN (a multiply by 0),
    not keras' 0. Make one a step, inside the traced step, and call it in
    the same order at every trace: a call's counter is its position.

    Args:
        seed: (2,) int32 or int64 seed of the step, e.g. a keras
            SeedGenerator's `next()`.

    Example:
    >>> dropout = StepDropout(tf.constant([1, 2], tf.int64))
    >>> y = dropout(tf.ones((2, 1000)), 0.25)
    >>> sorted(set(y.numpy().ravel().tolist()))
    [0.0, 1.3333333730697632]
    """

    def __init__(self, seed) -> None:
        self.key, _ = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
        self.calls = 0

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
        counter = tf.constant([0, self.calls], tf.uint64)
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
