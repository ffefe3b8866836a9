"""Bad input gets a ValueError naming the argument and the expectation."""

import numpy as np
import pytest
import tensorflow as tf

from kseq.models import RNNSeq2Seq, TransformerSeq2Seq
from support import random_batch

GOOD = random_batch()
SOURCE, TARGET = GOOD["source_ids"], GOOD["target_ids"]


def rnn():
    return RNNSeq2Seq(30, 30, embed_dim=8, units=8, attention="dot")


def transformer():
    return TransformerSeq2Seq(30, 30, num_layers=1, d_model=8, num_heads=2, ff_dim=8, max_length=10)


CALL_CASES = [
    ("float source", dict(source_ids=SOURCE.astype("float32"), target_ids=TARGET), "`source_ids` must hold integer token ids"),
    ("float target", dict(source_ids=SOURCE, target_ids=TARGET.astype("float64")), "`target_ids` must hold integer token ids"),
    ("rank-1 source", dict(source_ids=SOURCE[0], target_ids=TARGET), "`source_ids` must have rank 2"),
    ("rank-3 target", dict(source_ids=SOURCE, target_ids=TARGET[..., None]), "`target_ids` must have rank 2"),
    ("id >= vocab", dict(source_ids=SOURCE + 30, target_ids=TARGET), r"`source_ids` must hold ids in \[0, 30\)"),
    ("negative id", dict(source_ids=SOURCE, target_ids=-TARGET), r"`target_ids` must hold ids in \[0, 30\)"),
    ("empty source", dict(source_ids=SOURCE[:, :0], target_ids=TARGET), "`source_ids` is empty"),
    ("ragged list", dict(source_ids=[[4, 5], [6]], target_ids=TARGET), "`source_ids` must be a rectangular"),
    ("batch mismatch", dict(source_ids=SOURCE[:2], target_ids=TARGET), "same batch size"),
    ("tensor id >= vocab", dict(source_ids=tf.constant(SOURCE), target_ids=tf.constant(TARGET) + 40), "`target_ids` must hold ids"),
]


@pytest.mark.parametrize("make", [rnn, transformer])
@pytest.mark.parametrize("name,inputs,message", CALL_CASES, ids=[c[0] for c in CALL_CASES])
def test_bad_call_inputs(make, name, inputs, message):
    with pytest.raises(ValueError, match=message):
        make()(inputs)


@pytest.mark.parametrize("make", [rnn, transformer])
def test_bad_input_structure_and_generate_arguments(make):
    model = make()
    with pytest.raises(ValueError, match="dict with keys 'source_ids'"):
        model(SOURCE)
    with pytest.raises(ValueError, match="dict with keys 'source_ids'"):
        model({"source_ids": SOURCE})
    with pytest.raises(ValueError, match="`source_ids` must hold ids in"):
        model.generate(SOURCE + 100, max_length=5)
    with pytest.raises(ValueError, match="`method` must be one of"):
        model.generate(SOURCE, max_length=5, method="viterbi")
    with pytest.raises(ValueError, match="`max_length` must be >= 1"):
        model.generate(SOURCE, max_length=0)
    bad_options = [
        (dict(method="beam", beam_size=0), "`beam_size` must be >= 1"),
        (dict(method="beam", beam_size=2, num_return=3), "`num_return` \\(3\\) must be <="),
        (dict(method="beam", patience=1.5), "`patience` must be in \\(0, 1\\]"),
        (dict(num_return=2), "`num_return` > 1 needs method='beam'"),
        (dict(method="beam", length_penalty="0.6"), "`length_penalty` must be a number"),
        (dict(method="sample", temperature=0.0), "`temperature` must be a finite number"),
        (dict(method="sample", top_p=0.0), "`top_p` must be a finite number in \\(0"),
        (dict(method="sample", top_k=31), "`top_k` \\(31\\) must be <= target_vocab_size \\(30\\)"),
        (dict(method="sample", seed=1.5), "`seed` must be an integer"),
    ]
    for options, message in bad_options:
        with pytest.raises(ValueError, match=message):
            model.generate(SOURCE, max_length=5, **options)


def test_over_long_inputs_for_the_transformer():
    model = transformer()
    long = np.full((1, 11), 5, "int32")
    with pytest.raises(ValueError, match="`source_ids` has length 11, over the model's max_length 10"):
        model({"source_ids": long, "target_ids": TARGET[:1]})
    with pytest.raises(ValueError, match="`max_length`=11 is over the model's max_length 10"):
        model.generate(SOURCE, max_length=11)


def test_out_of_range_ids_inside_a_graph_fail_with_the_same_message():
    model = rnn()
    model(GOOD)
    traced = tf.function(lambda batch: model(batch))
    bad = {"source_ids": tf.constant(SOURCE), "target_ids": tf.constant(TARGET) + 40}
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`target_ids` must hold ids in \[0, 30\)"):
        traced(bad)


CONSTRUCTION_CASES = [
    (lambda: RNNSeq2Seq(30, 30, cell="transformer"), "`cell` must be one of"),
    (lambda: RNNSeq2Seq(30, 30, attention="luong"), "`attention` must be one of"),
    (lambda: RNNSeq2Seq(30, 30, units=0), "`units` must be >= 1"),
    (lambda: RNNSeq2Seq(30, 30, input_feeding=True),
     r"`input_feeding=True` needs a Luong attention, `attention` one of \['dot', 'general', 'concat'\]; got attention=None"),
    (lambda: RNNSeq2Seq(30, 30, attention="bahdanau", input_feeding=True),
     "`input_feeding=True` needs a Luong attention.*got attention='bahdanau'"),
    (lambda: RNNSeq2Seq(30, 30, attention="dot", input_feeding="yes"),
     "`input_feeding` must be True or False; got 'yes'"),
    (lambda: RNNSeq2Seq(30, 30, dropout=1.0), r"`dropout` must be a float in \[0, 1\)"),
    (lambda: RNNSeq2Seq(3, 30), "`source_vocab_size` must be > 4"),
    (lambda: RNNSeq2Seq(30, "30"), "`target_vocab_size` must be an integer"),
    (lambda: TransformerSeq2Seq(30, 30, d_model=30, num_heads=4), r"`d_model` \(30\) must be divisible by `num_heads` \(4\)"),
    (lambda: TransformerSeq2Seq(30, 40, share_embeddings=True), "`share_embeddings=True` needs one vocabulary"),
    (lambda: TransformerSeq2Seq(30, 30, position="rotary"), "`position` must be one of"),
    (lambda: TransformerSeq2Seq(30, 30, num_layers=0), "`num_layers` must be >= 1"),
]


@pytest.mark.parametrize("make,message", CONSTRUCTION_CASES)
def test_bad_configuration_fails_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_keras_file_of_another_class_is_refused(tmp_path):
    path = str(tmp_path / "rnn.keras")
    model = rnn()
    model(GOOD)
    model.save(path)
    import keras

    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, RNNSeq2Seq)
    assert not isinstance(loaded, TransformerSeq2Seq)
