"""Runs that survive faults: resuming mid-epoch, stopping on a non-finite
loss, and files that are written whole or not at all."""

import errno
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import kseq
from kseq._atomic import write_bytes_atomic
from kseq.training.loop.callbacks import NonFiniteLoss, StopOnNonFiniteLoss
from kseq.data.bucketing import bucketed_pair_dataset
from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.synthetic import reversed_words
from kseq.export import export_translator, publishing
from kseq.training.checkpoints.resume import ResumableBackup, TrainingPosition
from kseq.training.objectives import FusedAdam

LETTERS = "abcdefghij"


def pairs(count, seed=0):
    return reversed_words(count, LETTERS, min_length=2, max_length=11, seed=seed)


def tiny_model(tokenizer):
    model = kseq.models.RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=8, units=16,
                                   attention="dot")
    model.build()
    model.compile(FusedAdam(1e-2), kseq.losses.MaskedSparseCategoricalCrossentropy())
    return model


class Interrupt(keras.callbacks.Callback):
    """Raises at a given global step, as a kill would stop the process."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise KeyboardInterrupt


class BatchLog(keras.callbacks.Callback):
    """Records the global step of every batch trained on."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append(int(self.model.optimizer.iterations.numpy()))


def train(tmp_path, name, epochs, callbacks=(), fresh=True):
    tokenizer = CharacterTokenizer(LETTERS)
    position = TrainingPosition()
    data, _ = bucketed_pair_dataset(*pairs(100), tokenizer, tokenizer, token_budget=60, max_length=14,
                                    seed=3, position=position)
    keras.utils.set_random_seed(7)
    model = tiny_model(tokenizer)
    backup = ResumableBackup(str(tmp_path / name), position, save_freq=4)
    log = BatchLog()
    model.fit(data, epochs=epochs, callbacks=[*callbacks, log, backup], verbose=0, shuffle=False)
    return model, log, backup


@pytest.mark.e2e
def test_a_run_interrupted_mid_epoch_resumes_at_its_last_save_and_ends_like_an_uninterrupted_one(tmp_path):
    reference, reference_log, _ = train(tmp_path, "reference", epochs=2)
    steps = reference_log.steps[-1]
    per_epoch = steps // 2
    stop = per_epoch + 6  # two steps after the save at batch 4 of the second epoch
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, "interrupted", epochs=2, callbacks=[Interrupt(stop)])
    saved = ResumableBackup.saved_state(str(tmp_path / "interrupted"))
    assert (saved["epoch"], saved["batch"], saved["step"]) == (1, 4, per_epoch + 4)

    resumed, resumed_log, backup = train(tmp_path, "interrupted", epochs=2)
    assert backup.initial_epoch == 1
    assert resumed_log.steps == list(range(per_epoch + 5, steps + 1)), "continues with the next step"
    for mine, theirs in zip(resumed.weights, reference.weights):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-5)
    assert not os.path.exists(tmp_path / "interrupted"), "deleted after a completed run, as in keras"


def saved_once(tmp_path):
    """(model, its backup in tmp_path/saves, the folder, the state of its one save)."""
    model = tiny_model(CharacterTokenizer(LETTERS))
    backup_dir = tmp_path / "saves"
    backup = ResumableBackup(str(backup_dir), save_freq=1)
    backup.set_model(model)
    backup.on_train_begin()
    backup._save(0, 3)
    return model, backup, backup_dir, ResumableBackup.saved_state(str(backup_dir))


def test_a_save_is_published_only_when_complete(tmp_path, monkeypatch):
    model, backup, backup_dir, first = saved_once(tmp_path)

    def killed(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(model, "save_weights", killed)
    with pytest.raises(OSError):
        backup._save(0, 4)
    assert ResumableBackup.saved_state(str(backup_dir)) == first
    assert os.path.isfile(backup_dir / first["folder"] / "model.weights.h5")


def test_a_full_disk_keeps_the_previous_save_and_names_the_folder_and_the_space(tmp_path, monkeypatch):
    model, backup, backup_dir, first = saved_once(tmp_path)

    def full(path, **kwargs):
        with open(path, "wb") as f:
            f.write(b"half a file")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model, "save_weights", full)
    with pytest.raises(SystemExit, match=rf"no space left on the device of {backup_dir}: a save needs about "
                                         r"\d+ MiB free there\. The previous save is intact"):
        backup._save(0, 4)
    assert ResumableBackup.saved_state(str(backup_dir)) == first
    assert sorted(os.listdir(backup_dir)) == sorted([first["folder"], ResumableBackup.POINTER])


@pytest.fixture(scope="module")
def interrupted_backup(tmp_path_factory):
    """The backup folder of a run killed at step 6, made once: each test
    damages its own copy."""
    root = tmp_path_factory.mktemp("interrupted")
    with pytest.raises(KeyboardInterrupt):
        train(root, "run", epochs=2, callbacks=[Interrupt(6)])
    return root / "run"


@pytest.mark.parametrize("damage", ["pointer", "weights"])
def test_a_damaged_backup_is_named_with_how_to_start_over(tmp_path, damage, interrupted_backup):
    shutil.copytree(interrupted_backup, tmp_path / "run")
    saved = ResumableBackup.saved_state(str(tmp_path / "run"))
    if damage == "pointer":
        damaged = tmp_path / "run" / ResumableBackup.POINTER
        damaged.write_text('{"epoch": 0, "batch"')  # cut short
    else:
        damaged = tmp_path / "run" / saved["folder"] / "model.weights.h5"
        damaged.write_bytes(damaged.read_bytes()[:300])
    with pytest.raises(SystemExit, match=rf"{damaged} is damaged \(.*\)\. To start training over, delete "):
        train(tmp_path, "run", epochs=2)


def test_a_non_finite_loss_stops_fit_naming_the_step_and_what_to_try():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    x = np.ones((8, 2), "float32")
    x[5] = np.inf  # the third batch of two rows
    with pytest.raises(NonFiniteLoss, match=r"became (nan|inf) at step 3 \(batch 3 of the epoch\).*lower the"):
        model.fit(x, np.ones((8, 1)), batch_size=2, shuffle=False, verbose=0,
                  callbacks=[StopOnNonFiniteLoss("lower the learning rate")])
    assert int(model.optimizer.iterations.numpy()) == 3


def test_the_position_fixes_each_epochs_order_and_skips_batches(tmp_path):
    tokenizer = CharacterTokenizer(LETTERS)
    position = TrainingPosition()
    data, _ = bucketed_pair_dataset(*pairs(120), tokenizer, tokenizer, token_budget=60, max_length=14,
                                    seed=3, position=position)

    def rows(count=None):
        return [x["source_ids"].numpy().tolist() for x, _ in data.take(count or -1)]

    first, again = rows(), rows()
    position.set(1)
    second = rows()
    position.set(1, skip=3)
    # (Read to its end, a skipping epoch fails tf.data's cardinality check;
    # ResumableBackup ends that epoch after the batches it has left.)
    assert first == again and first != second and rows(len(second) - 3) == second[3:]
    assert int(data.cardinality()) == len(first)
    with pytest.raises(ValueError, match="outside `strategy.scope"):
        with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
            TrainingPosition()


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "vocab.model"
    write_bytes_atomic(str(path), b"old")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        write_bytes_atomic(str(path), b"new, half written")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["vocab.model"]


def test_a_crash_during_export_leaves_the_previous_version_servable(tmp_path, monkeypatch, tf_only):
    tokenizer = CharacterTokenizer(LETTERS)
    model = tiny_model(tokenizer)
    root = str(tmp_path / "export")
    # n_best=0: only serving_default is served, and each export would trace the n_best beam search too.
    first = export_translator(model, tokenizer, tokenizer, root, max_length=6, n_best=0)

    def crash(filepath, endpoints, resources):
        os.makedirs(os.path.join(filepath, "variables"))
        with open(os.path.join(filepath, "saved_model.pb"), "wb") as f:
            f.write(b"half")
        raise OSError("killed while writing")

    monkeypatch.setattr(publishing, "write_saved_model", crash)
    with pytest.raises(OSError, match="killed while writing"):
        export_translator(model, tokenizer, tokenizer, root, max_length=6, n_best=0)
    assert sorted(os.listdir(root)) == ["1"]
    served = tf_only.serve_texts(first, ["abc"])
    assert len(served["translation"]) == 1


def test_workers_agree_on_the_oldest_last_save_which_each_still_holds():
    from kseq.training.checkpoints.resume import agreed_save

    previous = {"step": 20, "folder": "step-20"}
    newest = {"step": 25, "folder": "step-25", "previous": previous}
    assert agreed_save(newest, [25, 25]) is newest
    assert agreed_save(newest, [25, 20]) is previous, "the other worker was killed before its step-25 save"
    assert agreed_save(previous, [25, 20]) is previous
    assert agreed_save(newest, [25, -1]) is None, "a worker with no save: all start over"
    with pytest.raises(SystemExit, match=r"hold different steps \(\[15, 25\]\).*delete every worker's backup"):
        agreed_save(newest, [25, 15])


def test_a_save_keeps_the_one_before_for_the_workers_to_agree_on(tmp_path):
    model, backup, backup_dir, first = saved_once(tmp_path)
    backup._save(0, 5)
    second = ResumableBackup.saved_state(str(backup_dir))
    assert second["previous"] == {key: value for key, value in first.items() if key != "previous"}
    backup._save(0, 7)
    assert sorted(os.listdir(backup_dir)) == sorted([second["folder"], ResumableBackup.saved_state(
        str(backup_dir))["folder"], ResumableBackup.POINTER]), "two saves, the older ones go"
