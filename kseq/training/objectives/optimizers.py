"""Optimizers with fewer, larger ops per step."""

import collections

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable("kseq")
class FusedAdam(keras.optimizers.Adam):
    """Adam whose update of each variable is one fused TensorFlow op.

    That op is TensorFlow's `ResourceApplyAdam` kernel, where keras' Adam
    runs about a dozen (two moment updates, bias corrections, square root,
    divide, three assignments), each with its own scheduling cost: keras'
    Adam and clipping were most of the ops of a Transformer's train step on
    a CPU (benchmarks/RESULTS.md, "Faster steps on a CPU").

    Same arguments, slots and arithmetic as keras' Adam (the step size
    lr * sqrt(1 - b2^t) / (1 - b1^t), epsilon added to sqrt(v)), so
    checkpoints and `.keras` files move between the two. Falls back to
    keras' update with `amsgrad=True`, outside the TensorFlow backend, and
    for variables that are not float32 or float64. The scalars every
    variable's update shares (beta^t, the rate) are made once a step, and
    clipping takes one op a gradient for its norm; the global norm it
    computes is added up in `gradient_norm_sum`.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(FusedAdam(1e-3, clipnorm=1.0), "mse")
    >>> history = model.fit(keras.ops.ones((4, 3)), keras.ops.zeros((4, 1)), verbose=0)
    >>> int(model.optimizer.iterations)
    1
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Outside the optimizer's variables (its saves and `.keras` files stay
        # keras Adam's); each replica adds its copy of the same norm, so the
        # first replica's copy is read, with no collective across workers.
        norms = tf.Variable(0.0, dtype="float64", trainable=False, name="gradient_norm_sum",
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        object.__setattr__(self, "_gradient_norm_sum", norms)

    @property
    def gradient_norm_sum(self):
        """The sum of the gradient's global norms (before clipping) over the
        updates so far, where clipping is on (`clipnorm` or
        `global_clipnorm`): a float64 `tf.Variable` clipping adds to, which
        `kseq.training.loop.StepCurves` reads between steps; None without
        clipping."""
        clipping = (self.clipnorm or 0) > 0 or (self.global_clipnorm or 0) > 0
        return self._gradient_norm_sum if clipping else None

    def update_step(self, gradient, variable, learning_rate):
        if not self._fuses(variable):
            return super().update_step(gradient, variable, learning_rate)
        self._fused_update(gradient, variable, self._step_scalars(learning_rate, variable.dtype))

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        # keras' TensorFlow backend calls `update_step` once a variable, and
        # each call would raise beta^t and cast the rate again: ~5 ops a
        # variable that a GPU pays for in launches. Here they are made once a
        # step, in the replica context (where a schedule's rate is), and
        # reach each variable's update as its device's copy.
        if self.amsgrad or keras.backend.backend() != "tensorflow":
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        dtypes = {tf.as_dtype(variable.dtype).name for variable in trainable_variables if self._fuses(variable)}
        scalars = {dtype: self._step_scalars(learning_rate, dtype) for dtype in dtypes}
        return super()._backend_update_step(grads, trainable_variables, _RateAndScalars(learning_rate, scalars))

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        if not isinstance(learning_rate, _RateAndScalars):
            return super()._distributed_tf_update_step(distribution, grads_and_vars, learning_rate)

        def update(variable, gradient, rate, scalars):
            if not self._fuses(variable):
                return self.update_step(gradient, variable, rate)
            return self._fused_update(gradient, variable, scalars[tf.as_dtype(variable.dtype).name])

        for gradient, variable in grads_and_vars:
            distribution.extended.update(variable, update, args=(gradient, learning_rate.rate, learning_rate.scalars),
                                         group=False)

    def _clip_gradients(self, grads):
        """keras' `clipnorm` and `global_clipnorm` with one `L2Loss` op a
        gradient for its squared norm, where keras' own runs 2 (global) to
        9 (per variable), each a kernel launch on a GPU."""
        clipping = (self.clipnorm or 0) > 0 or (self.global_clipnorm or 0) > 0
        if not clipping or keras.backend.backend() != "tensorflow":
            return super()._clip_gradients(grads)
        # A sparse gradient's rows are summed first, so that repeated ids
        # count as the dense gradient's norm does.
        present = [tf.convert_to_tensor(g) for g in grads if g is not None]
        if not present:
            return grads
        squares = 2.0 * tf.stack([tf.cast(tf.nn.l2_loss(g), "float32") for g in present])
        norm = tf.sqrt(tf.reduce_sum(squares))
        self._gradient_norm_sum.assign_add(tf.cast(norm, "float64"))
        if (self.clipnorm or 0) > 0:
            scales = tf.unstack(self.clipnorm / tf.maximum(tf.sqrt(squares), self.clipnorm))
        else:
            # keras' formula: NaN, not a silent no-op, for a non-finite norm.
            scale = self.global_clipnorm * tf.minimum(1.0 / norm, 1.0 / self.global_clipnorm) + (norm - norm)
            scales = [scale] * len(present)
        clipped = iter(g * tf.cast(s, g.dtype) for g, s in zip(present, scales))
        return [None if g is None else next(clipped) for g in grads]

    def _fuses(self, variable):
        return (not self.amsgrad and keras.backend.backend() == "tensorflow"
                and variable.dtype in ("float32", "float64"))

    def _step_scalars(self, learning_rate, dtype):
        """The inputs of `ResourceApplyAdam` that are the same for every variable of a step."""
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        return dict(beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
                    lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
                    epsilon=tf.cast(self.epsilon, dtype))

    def _fused_update(self, gradient, variable, scalars):
        index = self._get_variable_index(variable)
        momentum, velocity = self._momentums[index], self._velocities[index]
        gradient = tf.cast(tf.convert_to_tensor(gradient), variable.dtype)  # IndexedSlices too
        return tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(momentum), v=_handle(velocity), grad=gradient, **scalars)


class _RateAndScalars(collections.namedtuple("_RateAndScalars", ["rate", "scalars"])):
    """The rate and the per-dtype `ResourceApplyAdam` scalars of one step,
    passed through keras' cross-replica call in place of the rate."""


def _handle(variable):
    """The resource handle of a keras or TensorFlow variable; inside a
    strategy's `update` call, a mirrored variable's handle is its copy on
    the device being updated."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle
