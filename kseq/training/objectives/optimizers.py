"""Optimizers with fewer, larger ops per step."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable("kseq")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose update of each variable is TensorFlow's
    fused `ResourceApplyAdam` kernel: one op where keras' Adam runs about a
    dozen (two moment updates, bias corrections, square root, divide, three
    assignments). With the Transformer quick preset's 86 variables, keras'
    Adam and clipping were 2,970 of the 4,300 ops of a train step on a CPU,
    each with its own scheduling cost (benchmarks/RESULTS.md).

    Same arguments, slots and arithmetic as keras' Adam (the step size
    lr * sqrt(1 - b2^t) / (1 - b1^t), epsilon added to sqrt(v)), so
    checkpoints and `.keras` files move between the two. Falls back to
    keras' update with `amsgrad=True`, outside the TensorFlow backend, and
    for variables that are not float32 or float64.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(FusedAdam(1e-3, clipnorm=1.0), "mse")
    >>> history = model.fit(keras.ops.ones((4, 3)), keras.ops.zeros((4, 1)), verbose=0)
    >>> int(model.optimizer.iterations)
    1
    """

    def update_step(self, gradient, variable, learning_rate):
        if (self.amsgrad or keras.backend.backend() != "tensorflow"
                or variable.dtype not in ("float32", "float64")):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        momentum, velocity = self._momentums[index], self._velocities[index]
        gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)  # IndexedSlices too
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(momentum), v=_handle(velocity),
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype), beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype), epsilon=tf.cast(self.epsilon, dtype),
            grad=gradient)


def _handle(variable):
    """The resource handle of a keras or TensorFlow variable; inside a
    strategy's `update` call, a mirrored variable's handle is its copy on
    the device being updated."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle
