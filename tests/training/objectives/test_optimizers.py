import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq._compat import clip_after_all_reduce
from kseq.training.objectives.optimizers import FusedAdam


def train(optimizer_class, strategy, rate=1e-2, **kwargs):
    """Weights and optimizer variables after 3 epochs of a small classifier."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(3)])
        optimizer = clip_after_all_reduce(optimizer_class(rate, beta_2=0.98, epsilon=1e-9, **kwargs))
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(64, 5)), rng.integers(0, 3, 64), batch_size=16, epochs=3, verbose=0)
    return [np.asarray(v) for v in model.weights + model.optimizer.variables]


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("kwargs", [{"clipnorm": 1.0}, {"amsgrad": True}])
def test_fused_adam_takes_keras_adams_steps(replicas, kwargs):
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    expected, actual = train(keras.optimizers.Adam, strategy, **kwargs), train(FusedAdam, strategy, **kwargs)
    assert len(expected) == len(actual) > 4
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("replicas", [1, 2])
def test_fused_adam_takes_keras_adams_steps_on_a_schedule(replicas):
    # A schedule's rate is a value per replica: the update must take each device's copy.
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])

    def run(optimizer_class):
        schedule = keras.optimizers.schedules.ExponentialDecay(1e-2, decay_steps=4, decay_rate=0.5)
        return train(optimizer_class, strategy, rate=schedule, global_clipnorm=1.0)

    expected, actual = run(keras.optimizers.Adam), run(FusedAdam)
    assert len(expected) == len(actual) > 4
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


def test_fused_adam_squares_the_summed_gradient_of_repeated_ids():
    # An embedding gradient names row 1 twice; Adam's second moment is of
    # the summed gradient (4, 6), as keras' Adam computes it from the dense one.
    slices = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([1, 1]),
                              tf.constant([4, 2]))
    results = []
    for optimizer, gradient in ((keras.optimizers.Adam(0.1), tf.convert_to_tensor(slices)),
                                (FusedAdam(0.1), slices)):
        variable = keras.Variable(np.ones((4, 2), "float32"))
        for _ in range(2):
            optimizer.apply([gradient], [variable])
        results.append(np.asarray(variable))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5)
    assert not np.allclose(results[1][1], 1.0)


def test_fused_adam_round_trips():
    optimizer = FusedAdam(3e-4, beta_2=0.98, epsilon=1e-9, clipnorm=1.0)
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(clone, FusedAdam)
    assert clone.get_config() == optimizer.get_config()


def update_ops(optimizer_class, jit_compile):
    """The ops of one `apply` over four variables: TensorFlow graph ops, or
    under XLA the kernels of the optimized HLO (fusions, copies)."""
    variables = [keras.Variable(tf.random.normal(shape)) for shape in [(64, 32), (32,), (32, 16), (16,)]]
    optimizer = optimizer_class(1e-3)
    optimizer.build(variables)
    gradients = [tf.ones_like(variable.value) for variable in variables]
    apply = tf.function(lambda grads: optimizer.apply(grads, variables), jit_compile=jit_compile)
    if not jit_compile:
        graph = apply.get_concrete_function(gradients).graph
        return [op.type for op in graph.get_operations() if op.type not in ("Placeholder", "Const")]
    hlo = apply.experimental_get_compiler_ir(gradients)(stage="optimized_hlo")
    entry = hlo[hlo.index("ENTRY"):]
    kinds = re.findall(r"= \S+ ([\w-]+)\(", entry)
    return [kind for kind in kinds if kind not in ("parameter", "constant", "tuple", "get-tuple-element")]


def test_fused_adam_runs_one_op_a_variable_and_no_more_xla_kernels_than_keras_adam():
    # Issue 31: the update must not cost a GPU more kernel launches than keras' own.
    fused, keras_adam = update_ops(FusedAdam, False), update_ops(keras.optimizers.Adam, False)
    assert fused.count("ResourceApplyAdam") == 4
    assert len(fused) < len(keras_adam) / 2
    fused_xla, keras_xla = update_ops(FusedAdam, True), update_ops(keras.optimizers.Adam, True)
    assert 0 < len(fused_xla) <= len(keras_xla)


def test_fused_adam_sums_the_global_norms_it_clips_by_outside_its_variables():
    optimizer = FusedAdam(0.1, global_clipnorm=1.0)
    variable = keras.Variable(np.zeros(2, "float32"))
    for gradient in ([3.0, 4.0], [6.0, 8.0]):
        optimizer.apply([tf.constant(gradient)], [variable])
    assert float(optimizer.gradient_norm_sum.numpy()) == pytest.approx(15.0), "5 + 10, before clipping"
    reference = keras.optimizers.Adam(0.1, global_clipnorm=1.0)
    reference.build([keras.Variable(np.zeros(2, "float32"))])
    assert len(optimizer.variables) == len(reference.variables), "saves and .keras files stay Adam's"
    per_variable = FusedAdam(0.1, clipnorm=1.0)
    pair = [keras.Variable(np.zeros(1, "float32")), keras.Variable(np.zeros(1, "float32"))]
    per_variable.apply([tf.constant([3.0]), tf.constant([4.0])], pair)
    assert float(per_variable.gradient_norm_sum.numpy()) == pytest.approx(5.0), "the global norm, per-variable clip"
    assert FusedAdam(0.1).gradient_norm_sum is None, "no clipping: no norm"


def test_two_replicas_sum_the_norms_one_device_does():
    """Each replica adds the norm of the summed gradient; the first replica's copy is read."""
    sums = []
    for replicas in (1, 2):
        keras.utils.set_random_seed(0)
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        with strategy.scope():
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
            optimizer = clip_after_all_reduce(FusedAdam(1e-2, global_clipnorm=0.5))
            model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        rng = np.random.default_rng(0)
        model.fit(rng.normal(size=(64, 5)), rng.integers(0, 3, 64), batch_size=16, epochs=2, verbose=0)
        sums.append(float(strategy.experimental_local_results(optimizer.gradient_norm_sum)[-1].numpy()))
    assert sums[0] > 0 and sums[1] == pytest.approx(sums[0], rel=1e-5)
