"""The traced train step, inspected for what would stall a GPU (issue 31):
an input check that the step must wait for copies its condition from the
device to the host first, every step."""

import numpy as np
import pytest
import tensorflow as tf
from support import VOCAB, random_batch, small_model

from kseq.training.task import compile_model
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from kseq.training.objectives.optimizers import FusedAdam

HOST_WAITS = {"Assert", "If", "StatelessIf"}


def compiled(kind, config):
    model = small_model(kind, config, dropout=0.0)
    batch = random_batch()
    model(batch)
    compile_model(model, FusedAdam(1e-3, clipnorm=1.0),
                         MaskedSparseCategoricalCrossentropy(label_smoothing=0.1))
    model.optimizer.build(model.trainable_variables)
    labels = np.roll(batch["target_ids"], -1, axis=1)
    return model, batch, labels


def ancestors(ops):
    """Every op that `ops` wait for, through data and control edges."""
    seen, stack = {}, list(ops)
    while stack:
        op = stack.pop()
        for parent in [tensor.op for tensor in op.inputs] + list(op.control_inputs):
            if parent.name not in seen:
                seen[parent.name] = parent
                stack.append(parent)
    return seen.values()


@pytest.mark.parametrize("kind, config", [("transformer", {}), ("rnn", dict(attention="general"))])
def test_no_update_waits_for_an_input_check(kind, config):
    model, batch, labels = compiled(kind, config)
    data = ({key: tf.constant(value) for key, value in batch.items()}, tf.constant(labels))
    graph = tf.function(model.train_step).get_concrete_function(data).graph
    operations = graph.get_operations()
    updates = [op for op in operations if op.type == "ResourceApplyAdam"]
    assert len(updates) == len(model.trainable_variables)
    waits = sorted({op.type for op in ancestors(updates)} & HOST_WAITS)
    assert waits == []
    # The checks are still there (source ids, target ids, labels), as side effects.
    assert sum(op.type == "Assert" for op in operations) >= 3


@pytest.mark.parametrize("bad, message", [
    ("labels", "`y_true` holds ids outside"),
    ("source_ids", r"`source_ids` must hold ids in \[0, %d\)" % VOCAB),
])
def test_fit_still_names_an_id_outside_the_vocabulary(bad, message):
    model, batch, labels = compiled("transformer", {})
    if bad == "labels":
        labels[0, 0] = VOCAB
    else:
        batch["source_ids"][0, 0] = VOCAB + 5
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        model.fit(batch, labels, epochs=1, verbose=0)
