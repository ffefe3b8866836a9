"""The keras and TensorFlow behaviour kseq._compat relies on, checked as
installed: a failure here says which entry an upgrade changed."""

import importlib
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq._compat import batches_applied, continue_after_epoch, end_epoch_early, keras_uses_cudnn


def test_keras_cudnn_choice_is_asked_where_keras_decides_it(monkeypatch):
    lstm = keras.layers.LSTM(4)
    assert keras_uses_cudnn(lstm) == bool(tf.config.list_physical_devices("GPU"))
    keras_rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    monkeypatch.setattr(keras_rnn, "_is_gpu_available", lambda: True)
    assert keras_uses_cudnn(lstm) and keras_uses_cudnn(keras.layers.GRU(4))
    assert not keras_uses_cudnn(keras.layers.GRU(4, reset_after=False))
    assert not keras_uses_cudnn(keras.layers.LSTM(4, use_cudnn=False))
    assert not keras_uses_cudnn(keras.layers.SimpleRNN(4))


class EndEveryThirdBatch(keras.callbacks.Callback):
    def __init__(self, stop_at=None):
        super().__init__()
        self.stop_at, self.epochs, self.batches = stop_at, [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.batches.append(int(self.model.optimizer.iterations.numpy()))

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step == self.stop_at:
            self.model.stop_training = True
        elif step % 3 == 0:
            end_epoch_early(self.model)

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((int(self.model.optimizer.iterations.numpy()), "val_loss" in logs))
        continue_after_epoch(self.model)


def test_fit_ends_an_epoch_early_keeps_its_iterator_and_honours_a_real_stop():
    x = np.arange(20, dtype="float32").reshape(10, 2, 1)
    data = tf.data.Dataset.from_tensor_slices((x, x))
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    callback = EndEveryThirdBatch(stop_at=7)
    model.fit(data, validation_data=data.take(1), epochs=10, steps_per_epoch=10, callbacks=[callback],
              verbose=0)
    assert callback.epochs == [(3, True), (6, True), (7, True)]
    assert callback.batches == list(range(7)), "each epoch continued the same iterator"


def test_sublayers_walks_into_bidirectional_layers():
    from kseq._compat import sublayers

    layer = keras.layers.Bidirectional(keras.layers.GRU(3))
    layer.build((None, None, 2))
    names = [type(sub).__name__ for sub in sublayers(layer)]
    assert names.count("GRU") == 2, names


def test_keras_recurrent_cells_still_fail_on_an_empty_batch():
    """kseq._compat.is_empty_batch: models answer (0, ...) themselves."""
    import pytest

    with pytest.raises(Exception, match="Biases must be 1D"):
        keras.layers.LSTM(3)(np.zeros((0, 2, 4), "float32"))


def test_tensorflow_text_still_loses_its_model_when_the_seed_is_set():
    """kseq._compat.call_recreating_lost_resource."""
    import pytest

    from kseq.data.subword_tokenizer import SubwordTokenizer

    proto = SubwordTokenizer.train(["a b c d e"] * 20, vocab_size=270).proto
    import tensorflow_text

    op = tensorflow_text.SentencepieceTokenizer(model=proto)
    op.tokenize(["a b"])
    tf.random.set_seed(3)
    with pytest.raises(tf.errors.NotFoundError):
        op.tokenize(["a b"])
    tokenizer = SubwordTokenizer(proto)
    tf.random.set_seed(4)
    assert tokenizer.tokenize(["a b"]).shape[0] == 1, "kseq's tokenizer recreates it"


def tiny_model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_keras_keeps_its_traced_train_function_across_fits():
    """kseq._compat.forget_traced_function: a model that swaps variables drops it."""
    from kseq._compat import forget_traced_function

    model = tiny_model()
    model.fit(np.ones((2, 1)), np.ones((2, 1)), verbose=0)
    first = model.train_function
    model.fit(np.ones((2, 1)), np.ones((2, 1)), verbose=0)
    assert model.train_function is first
    forget_traced_function(model, "train")
    model.fit(np.ones((2, 1)), np.ones((2, 1)), verbose=0)
    assert model.train_function is not first


class CountedSteps(keras.Model):
    """A Dense model, built by a call, whose train steps are counted as they trace."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.traces = 0

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        self.traces += 1
        return super().train_step(data)


def test_keras_still_builds_the_optimizer_inside_the_first_trace_without_a_strategy():
    """kseq._compat.OptimizerBuiltBeforeTracing: without it the first fit
    traces the train step twice (the optimizer's variables are created in
    the first trace); with it, once, and the weights end the same."""
    from kseq._compat import OptimizerBuiltBeforeTracing

    class Fixed(OptimizerBuiltBeforeTracing, CountedSteps):
        pass

    weights = []
    for model_class, traces in ((CountedSteps, 2), (Fixed, 1)):
        keras.utils.set_random_seed(3)
        model = model_class()
        model(np.zeros((1, 1)))
        model.compile(keras.optimizers.Adam(0.1), "mse")
        model.fit(np.arange(8.0).reshape(4, 2)[:, :1], np.ones((4, 1)), batch_size=2, epochs=2, verbose=0)
        assert model.traces == traces, model_class.__name__
        weights.append([w.numpy() for w in model.weights + model.optimizer.variables])
    for plain, fixed in zip(*weights):
        np.testing.assert_array_equal(plain, fixed)


def test_fit_still_reads_the_private_initial_epoch():
    """kseq._compat.resume_fit_at_epoch (keras' BackupAndRestore does the same)."""
    from kseq._compat import resume_fit_at_epoch

    model = tiny_model()
    resume_fit_at_epoch(model, 2)
    history = model.fit(np.ones((2, 1)), np.ones((2, 1)), epochs=4, verbose=0)
    assert len(history.history["loss"]) == 2


def test_mirrored_strategies_still_share_collective_keys_without_the_fix():
    """kseq._compat.fresh_collective_keys_per_strategy (conftest.py installs it)."""
    from tensorflow.python.distribute import mirrored_strategy

    before = mirrored_strategy.MirroredStrategy._collective_key_base
    tf.distribute.MirroredStrategy(["/cpu:0"])
    assert mirrored_strategy.MirroredStrategy._collective_key_base == before + 100000


def test_keras_still_reduces_scalar_logs_with_an_axis_across_workers(monkeypatch):
    """kseq._compat.fix_keras_multi_worker_logs: keras' reduction fails on the
    scalars every model logs once it believes it runs on several workers;
    the fix averages them."""
    import pytest
    from keras.src.backend.tensorflow import trainer

    from kseq._compat import fix_keras_multi_worker_logs

    fix_keras_multi_worker_logs()
    fixed = trainer.reduce_per_replica
    monkeypatch.setattr(trainer, "_collective_all_reduce_multi_worker", lambda strategy: True)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    values = strategy.run(lambda: tf.constant(2.0))
    with pytest.raises(Exception, match="(?i)reduction dimension|axis"):
        fixed.keras_original({"loss": values}, strategy, "auto")
    assert float(fixed({"loss": values}, strategy, "auto")["loss"]) == 2.0


def test_keras_first_batch_build_still_averages_uneven_shards():
    """kseq._compat.FirstShardBuild: without it, fit's first-batch build
    under two replicas fails on a batch that splits unevenly."""
    import pytest

    from kseq._compat import FirstShardBuild

    class Plain(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embedding = keras.layers.Embedding(10, 2)
            self.dense = keras.layers.Dense(1)

        def call(self, ids):
            return self.dense(keras.ops.mean(self.embedding(ids), axis=1))

    class Fixed(FirstShardBuild, Plain):
        pass

    data = tf.data.Dataset.from_tensors((np.ones((3, 4), "int32"), np.ones((3, 1), "float32")))
    for model_class, fails in ((Plain, True), (Fixed, False)):
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            model = model_class()
            model.compile("sgd", "mse", metrics=["mae"])
        if fails:
            with pytest.raises(Exception):
                model.fit(data, verbose=0)
        else:
            model.fit(data, verbose=0)


def test_an_unverified_keras_version_is_warned_about(monkeypatch):
    import pytest

    from kseq import _compat

    monkeypatch.setattr(keras, "__version__", "3.99.0")
    with pytest.warns(UserWarning, match="checked on keras 3.15.1; 3.99.0 is installed"):
        _compat.check_versions()


def fit_with_keras_accumulation(strategy):
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(gradient_accumulation_steps=2), "mse")
    model.fit(np.ones((8, 2)), np.zeros((8, 1)), batch_size=2, verbose=0)
    return model.optimizer


def test_keras_accumulation_still_cannot_all_reduce_and_counts_batches_in_iterations():
    # accumulate_after_all_reduce exists because of the first; batches_applied reads the second.
    try:
        fit_with_keras_accumulation(tf.distribute.MirroredStrategy(["/cpu:0"]))
        failed = False
    except RuntimeError as error:
        failed = "merge_call" in str(error)
    assert failed, "keras' gradient_accumulation_steps now runs under a MirroredStrategy"
    optimizer = fit_with_keras_accumulation(tf.distribute.get_strategy())
    assert (batches_applied(optimizer), int(optimizer.iterations.numpy())) == (4, 2)


def test_the_loss_tracker_weighs_batches_by_rows_and_evaluate_zeroes_it_after_on_test_begin():
    from kseq._compat import loss_tracker

    seen = []

    class Totals(keras.callbacks.Callback):
        def on_test_begin(self, logs=None):
            seen.append((float(loss_tracker(self.model).total.numpy()), float(loss_tracker(self.model).count.numpy())))

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    model.compile(keras.optimizers.SGD(0.0), "mse")
    x, y = np.ones((5, 1), "float32"), np.array([[1.0], [1.0], [1.0], [2.0], [2.0]], "float32")
    history = model.fit(x, y, batch_size=3, epochs=1, verbose=0, validation_data=(x[:4], y[:4]),
                        callbacks=[Totals()])
    assert seen == [(3 * 1.0 + 2 * 4.0, 5.0)], "batch means 1 and 4 weighted by 3 and 2 rows"
    assert history.history["loss"][0] == pytest.approx(11.0 / 5)
    assert float(loss_tracker(model).count.numpy()) == 4.0, "then the validation's 4 rows"


def test_the_tensorboard_callback_keeps_its_train_writer_private(tmp_path):
    from kseq._compat import tensorboard_train_writer

    board = keras.callbacks.TensorBoard(str(tmp_path))
    board.set_model(keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)]))
    writer = tensorboard_train_writer(board)
    assert writer is tensorboard_train_writer(board) and isinstance(writer, tf.summary.SummaryWriter)
    with writer.as_default(step=3):
        tf.summary.scalar("x", 1.0)
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "train"))
