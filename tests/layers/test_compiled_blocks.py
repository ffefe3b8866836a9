"""`TransformerSeq2Seq(compiled_blocks=True)`: a stack's blocks through one
XLA-compiled function that takes a block's weights. Traced once a stack
whatever the depth, capturing nothing; the uncompiled blocks' outputs and
gradients; dropout masks from the step's seed; under two replicas what one
device computes; the argument in configs and `.keras` files, False where a
config lacks it."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.layers.compiled_blocks import CompiledBlocks
from kseq.layers.transformer_encoder_block import TransformerEncoderBlock
from kseq.models import TransformerSeq2Seq
from kseq.tasks import reverse, translate
from kseq.training import task
from kseq.training.devices.xla import decide_jit_compile, jit_decision
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from support import VOCAB, load_test_module, random_batch

equivalence = load_test_module("training/devices/test_distributed_equivalence")


def built(compiled_blocks, num_layers=2, dropout=0.0, norm_first=False):
    keras.utils.set_random_seed(3)
    model = TransformerSeq2Seq(VOCAB, VOCAB, num_layers=num_layers, d_model=16, num_heads=2, ff_dim=24,
                               dropout=dropout, max_length=32, norm_first=norm_first,
                               compiled_blocks=compiled_blocks)
    model(random_batch())
    return model


def step(model, batch):
    labels = np.roll(batch["target_ids"], -1, axis=1)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    seed = tf.constant([5, 6], tf.int64)

    @tf.function
    def run(batch):
        if model.dropout:  # the step's dropout seed, fixed: both models draw the same masks
            state = model.embedding_dropout.seed_generator.state
            state.assign(tf.cast(seed, state.dtype))
        with tf.GradientTape() as tape:
            logits = model(batch, training=True)
            value = loss(labels, logits)
        return [logits, value] + [tf.convert_to_tensor(g) for g in tape.gradient(value, model.trainable_weights)]

    return [np.asarray(t) for t in run(batch)]


def test_outputs_and_gradients_are_the_uncompiled_blocks():
    batch = random_batch()
    plain = built(False)
    compiled = built(True)
    compiled.set_weights(plain.get_weights())
    expected, actual = step(plain, batch), step(compiled, batch)
    assert len(actual) == len(expected) == 2 + len(plain.trainable_weights)
    for a, e, name in zip(actual, expected, ["logits", "loss"] + [w.path for w in plain.trainable_weights]):
        np.testing.assert_allclose(a, e, atol=2e-5 * max(1.0, np.abs(e).max()), rtol=1e-4, err_msg=name)


def test_under_a_strategy_each_block_runs_and_trains_its_own_weights():
    """kseq-train's default strategy, mirrored on one device: the compiled
    function reads each block's weights, not the first block's, in float32
    (where keras passes variables as they are) and under mixed_bfloat16
    (where it passes the float32 LayerNorm weights so)."""
    batch = {name: tf.constant(ids) for name, ids in random_batch().items()}
    labels = tf.constant(np.roll(batch["target_ids"], -1, axis=1))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    rng = np.random.default_rng(4)
    for policy in ("float32", "mixed_bfloat16"):
        results = []
        for compiled_blocks in (False, True):
            with strategy.scope():
                model = TransformerSeq2Seq(VOCAB, VOCAB, num_layers=2, d_model=16, num_heads=2, ff_dim=24,
                                           dropout=0.0, max_length=32, compiled_blocks=compiled_blocks, dtype=policy)
                model.build()
            if not results:
                weights = [rng.normal(size=w.shape) * 0.3 for w in model.weights]  # each block its own
            model.set_weights(weights)
            loss = MaskedSparseCategoricalCrossentropy()

            def replica_step(batch, model=model, loss=loss):
                with tf.GradientTape() as tape:
                    logits = model(batch, training=True)
                    value = loss(labels, logits)
                return [tf.cast(logits, tf.float32)] + tape.gradient(value, model.trainable_weights)

            outputs = tf.function(lambda: strategy.run(replica_step, args=(batch,)))()
            assert all(g is not None for g in outputs), policy
            results.append([np.asarray(tf.convert_to_tensor(t)) for t in outputs])
        tolerance = 1e-4 if policy == "float32" else 3e-2
        for plain, compiled, name in zip(*results, ["logits"] + [w.path for w in model.trainable_weights]):
            np.testing.assert_allclose(compiled, plain, atol=tolerance * max(1.0, np.abs(plain).max()), rtol=tolerance,
                                       err_msg=f"{policy}: {name}")


def test_dropout_masks_follow_the_steps_seed():
    """XLA's Philox draws other bits than TensorFlow's kernel for a key, so
    the masks are not the uncompiled path's: they repeat with the seed."""
    batch = random_batch()
    model = built(True, dropout=0.3, norm_first=True)
    first, again = step(model, batch), step(model, batch)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    evaluated = np.asarray(model(batch, training=False))
    assert np.abs(first[0] - evaluated).max() > 1e-2
    assert all(np.isfinite(g).all() for g in first[2:])


def test_each_stack_traces_one_function_whatever_the_depth():
    model = built(True, num_layers=3, dropout=0.1)
    step(model, random_batch())
    encoder, decoder = model._compiled
    for compiled, block in ((encoder, model.encoder_blocks[-1]), (decoder, model.decoder_blocks[-1])):
        assert compiled._function.experimental_get_tracing_count() == 1
        assert compiled.template is not block
    inputs = [tf.convert_to_tensor(v.value) for v in model.encoder_blocks[1].trainable_variables]  # as the call reads them
    key = tf.zeros([1], tf.uint64)
    concrete = encoder._function.get_concrete_function(
        inputs, (tf.zeros((2, 5, 16)), tf.ones((2, 5), tf.bool)), key, tf.constant(1, tf.int64))
    assert concrete.captured_inputs == []  # the weights arrive as arguments, none is closed over


def test_evaluation_and_decoding_run_the_layers():
    model = built(True)
    batch = random_batch()
    model(batch, training=False)
    model.generate(batch["source_ids"], max_length=5)
    assert all(c._function.experimental_get_tracing_count() == 0 for c in model._compiled)


def test_the_argument_is_in_configs_and_keras_files_and_an_older_config_reads_false(tmp_path):
    batch = random_batch()
    plain, compiled = built(False, dropout=0.1), built(True, dropout=0.1)

    def inside(model):  # paths below the model's own (automatic, so different) name
        return [w.path.split("/", 1)[1] for w in model.weights]

    assert inside(plain) == inside(compiled)
    assert (plain.get_config()["compiled_blocks"], compiled.get_config()["compiled_blocks"]) == (False, True)
    older = {name: value for name, value in plain.get_config().items() if name != "compiled_blocks"}
    assert TransformerSeq2Seq.from_config(older).compiled_blocks is False
    compiled.save(str(tmp_path / "compiled.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "compiled.keras"))
    assert loaded.compiled_blocks and loaded._compiled is not None
    np.testing.assert_allclose(np.asarray(loaded(batch)), np.asarray(compiled(batch)), atol=1e-6, rtol=1e-6)
    plain.set_weights(compiled.get_weights())
    np.testing.assert_allclose(np.asarray(plain(batch)), np.asarray(compiled(batch)), atol=1e-6, rtol=1e-6)


def test_jit_compile_blocks_reaches_the_model_the_xla_cache_and_the_decision(tmp_path, monkeypatch):
    """`kseq-train translate` and `reverse` build their Transformer with
    compiled blocks, the run names its XLA cache, and metrics.json's
    `jit_compile` says "blocks"; without the flag nothing compiles."""
    options = translate.parse_args(["--jit-compile", "blocks", "--logdir", str(tmp_path / "run"),
                                    "--xla-cache", str(tmp_path / "xla")])
    model = options.build(40, 17)
    assert model.compiled_blocks and not translate.parse_args([]).build(40, 17).compiled_blocks
    assert reverse.build_model(reverse.parse_args(["--jit-compile", "blocks"]), 30).compiled_blocks
    assert not reverse.build_model(reverse.parse_args([]), 30).compiled_blocks
    decision = decide_jit_compile(options.jit_compile, num_shapes=3)
    assert decision.compiled_blocks and not decision.use
    for name in ("TF_XLA_FLAGS", "XLA_FLAGS"):  # what the run sets, put back after the test
        monkeypatch.setenv(name, "")
    run = task.start(options, decision)
    assert run.xla_cache == str(tmp_path / "xla") and run.jit.compiled_blocks
    assert jit_decision(model, run.jit).metrics() == {
        "jit_compile": "blocks", "jit_compile_reason": decision.reason, "jit_compile_requested": "blocks"}
    plain = jit_decision(translate.parse_args([]).build(40, 17), decision)
    assert plain.value is False and "compiles no blocks" in plain.reason


def test_a_block_of_another_structure_is_refused():
    small, wide = (TransformerEncoderBlock(num_heads=2, ff_dim=ff) for ff in (8, 16))
    for block in (small, wide):
        block.build((None, None, 4))
    with pytest.raises(ValueError, match="other weights than the compiled template"):
        CompiledBlocks(small)(wide, (tf.ones((1, 2, 4)),))


@pytest.mark.long
def test_two_replicas_train_as_one_device():
    """The weights are arguments, so each replica runs the function on its
    own copies: tests/training/devices/test_distributed_equivalence.py's
    check, on its first batch only (8 rows of one shape, their real target
    tokens split unevenly): every other shape is a compilation per device."""
    data = equivalence.dataset().take(1).repeat()

    def make():  # test_distributed_equivalence's Transformer, its blocks compiled
        return TransformerSeq2Seq(equivalence.VOCAB, equivalence.VOCAB, num_layers=1, d_model=16, num_heads=2,
                                  ff_dim=32, dropout=0.0, max_length=32, compiled_blocks=True)

    reference = make()
    reference.build()
    start = reference.get_weights()
    one_losses, one_weights = equivalence.train(make, start, data, tf.distribute.get_strategy())
    two_losses, two_weights = equivalence.train(
        make, start, data, tf.distribute.MirroredStrategy(equivalence.DEVICES))
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    assert max(np.abs(one - first).max() for one, first in zip(one_weights, start)) > 2e-2
    for one, two, weight in zip(one_weights, two_weights, reference.weights):
        np.testing.assert_allclose(two, one, rtol=1e-4, atol=1e-5, err_msg=weight.path)
