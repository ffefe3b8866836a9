"""The keras and TensorFlow behaviour kseq._compat relies on, checked as
installed: a failure here says which entry an upgrade changed."""

import importlib

import keras
import numpy as np
import tensorflow as tf

from kseq._compat import continue_after_epoch, end_epoch_early, keras_uses_cudnn


def test_keras_cudnn_choice_is_asked_where_keras_decides_it(monkeypatch):
    lstm = keras.layers.LSTM(4)
    assert not keras_uses_cudnn(lstm), "no GPU here"
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
