"""GenerationMonitor, TimeLimit, AttentionMaps, is_chief and write_hparams."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_multiplexer

from kseq.training.loop.callbacks import AttentionMaps, GenerationMonitor, TimeLimit
from kseq.training.devices.distribution import is_chief
from kseq.training.reporting.tensorboard import write_hparams
from support import random_batch, small_model


def tiny_fit(callbacks, epochs=2, batches=3):
    x = np.ones((batches * 2, 1), "float32")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(x, x, batch_size=2, epochs=epochs, callbacks=callbacks, verbose=0)
    return model


def events(logdir, run):
    runs = event_multiplexer.EventMultiplexer()
    runs.AddRunsFromDirectory(str(logdir))
    runs.Reload()
    return runs, runs.Runs()[run]["tensors"]


def test_generation_monitor_scores_logs_and_writes_at_the_global_step(tmp_path):
    sources, references = ["ab", "cd", "ef"], ["ba", "dc", "xx"]
    reverse = lambda texts: [t[::-1] for t in texts]  # noqa: E731
    accuracy = lambda h, r: float(np.mean([a == b for a, b in zip(h, r)]))  # noqa: E731
    logs_seen = []
    grab = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: logs_seen.append(dict(logs)))
    monitor = GenerationMonitor(sources, references, reverse, {"exact": accuracy}, logdir=str(tmp_path))
    tiny_fit([monitor, grab])
    assert monitor.history == [{"exact": 2 / 3}] * 2
    assert all(logs["val_exact"] == pytest.approx(2 / 3) for logs in logs_seen)
    runs, tags = events(tmp_path, "generation")
    assert {"exact", "sentences_scored", "samples"} <= set(tags)
    assert [event.step for event in runs.Tensors("generation", "exact")] == [3, 6]
    table = runs.Tensors("generation", "samples")[-1].tensor_proto.string_val[0].decode()
    assert "| ab | ba | ba |" in table


def test_a_time_bounded_translation_is_scored_on_what_it_reached():
    seen = {}

    def two_only(texts):
        return [t.upper() for t in texts[:2]]

    def scores(hypotheses, references):
        seen["pairs"] = list(zip(hypotheses, references))
        return {"n": len(hypotheses)}

    monitor = GenerationMonitor(["a", "b", "c"], ["A", "B", "C"], two_only, scores)
    tiny_fit([monitor], epochs=1)
    assert seen["pairs"] == [("A", "A"), ("B", "B")] and monitor.history == [{"n": 2.0}]


def test_time_limit_stops_within_a_step_and_counts_a_resumed_budget():
    fresh = TimeLimit(minutes=1e-9)
    tiny_fit([fresh], epochs=5)
    assert fresh.stopped_at_step == 1
    resumed = TimeLimit(minutes=1.0, spent_seconds=61.0)
    tiny_fit([resumed], epochs=5)
    assert resumed.stopped_at_step == 1
    unlimited = TimeLimit(minutes=None)
    model = tiny_fit([unlimited], epochs=2)
    assert unlimited.stopped_at_step is None and int(model.optimizer.iterations.numpy()) == 6


def test_attention_maps_are_png_images_at_the_global_step(tmp_path):
    model = small_model("rnn", dict(cell="gru", attention="general"), dropout=0.0)
    source = random_batch()["source_ids"][:2]
    model.compile("adam", "mse")
    model(random_batch())
    maps = AttentionMaps(source, lambda ids: model.generate(ids, max_length=5),
                         lambda ids: [str(int(i)) for i in ids], str(tmp_path))
    maps.set_model(model)
    maps.on_epoch_end(0)
    runs, tags = events(tmp_path, "attention")
    assert {"sentence_0", "sentence_1"} <= set(tags)
    image = runs.Tensors("attention", "sentence_0")[-1]
    assert image.step == 0 and image.tensor_proto.string_val[2].startswith(b"\x89PNG")


def strategy_with(task_type, task_id, cluster):
    spec = types.SimpleNamespace(as_dict=lambda: cluster)
    resolver = types.SimpleNamespace(task_type=task_type, task_id=task_id, cluster_spec=lambda: spec)
    return types.SimpleNamespace(cluster_resolver=resolver)


def test_is_chief():
    workers = {"worker": ["a:1", "b:1"]}
    assert is_chief(tf.distribute.get_strategy())
    assert is_chief(strategy_with("worker", 0, workers))
    assert not is_chief(strategy_with("worker", 1, workers))
    with_chief = {"chief": ["c:1"], **workers}
    assert is_chief(strategy_with("chief", 0, with_chief))
    assert not is_chief(strategy_with("worker", 0, with_chief))


def test_write_hparams_logs_every_value_as_a_scalar_or_string(tmp_path):
    write_hparams(str(tmp_path), {"lr": 0.1, "layers": 2, "arch": "rnn", "prompts": ["a", "b"], "tied": True})
    runs, tags = events(tmp_path, ".")
    assert "_hparams_/session_start_info" in tags, "in the run's own folder, beside its curves' folders"
    start = runs.Tensors(".", "_hparams_/session_start_info")[0].tensor_proto
    from tensorboard.plugins.hparams import plugin_data_pb2

    data = plugin_data_pb2.HParamsPluginData.FromString(
        runs.SummaryMetadata(".", "_hparams_/session_start_info").plugin_data.content)
    values = data.session_start_info.hparams
    assert values["lr"].number_value == 0.1 and values["arch"].string_value == "rnn"
    assert values["prompts"].string_value == "['a', 'b']" and values["tied"].bool_value is True
    assert start is not None
