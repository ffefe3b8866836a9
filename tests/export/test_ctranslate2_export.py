"""kseq's Transformer as a CTranslate2 model: the same outputs and scores."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import kseq
from kseq.data.subword_tokenizer import SubwordTokenizer
from kseq.decoding import BeamSearch, GreedySearch
from kseq.export.ctranslate2_model import export_ctranslate2, vocabulary
from kseq.models import RNNSeq2Seq, TransformerSeq2Seq
from kseq.special_ids import BOS_ID, EOS_ID
from kseq.training.objectives import FusedAdam

ctranslate2 = pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed "
                                  "(pip install 'kseq[ctranslate2]')")

WORDS = "the cat sat on a mat dog ran far away red blue green house tree".split()
MAX_STEPS = 30


def sentences(count, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(1, 10))) for _ in range(count)]


@pytest.fixture(scope="module")
def tokenizer():
    return SubwordTokenizer.train(sentences(300, seed=0), vocab_size=300)


def reversal_model(tokenizer, **config):
    """A small Transformer trained briefly to reverse the word order, so that
    it ends its outputs (EOS) at lengths of its own."""
    keras.utils.set_random_seed(0)
    size = tokenizer.vocab_size
    model = TransformerSeq2Seq(size, size, num_layers=2, d_model=32, num_heads=4, ff_dim=64, dropout=0.0,
                               max_length=40, **config)
    texts = sentences(300, seed=1)
    source = tokenizer.tokenize(texts).to_tensor()
    target = tokenizer.tokenize([" ".join(reversed(text.split())) for text in texts])
    rows = target.nrows()
    decoder_in = tf.concat([tf.fill([rows, 1], BOS_ID), target], 1).to_tensor()
    labels = tf.concat([target, tf.fill([rows, 1], EOS_ID)], 1).to_tensor()
    model.compile(FusedAdam(3e-3), kseq.losses.MaskedSparseCategoricalCrossentropy())
    model.fit({"source_ids": source, "target_ids": decoder_in}, labels, batch_size=32, epochs=15, verbose=0)
    return model


def kseq_outputs(model, tokenizer, texts, search):
    """(token id lists without EOS and PAD, scores) of kseq's search."""
    generated, scores = model.search(tokenizer.tokenize(texts).to_tensor(), search)
    generated = np.asarray(generated).reshape(len(texts), -1, np.asarray(generated).shape[-1])[:, 0]
    scores = np.asarray(scores).reshape(len(texts), -1)[:, 0]
    outputs = []
    for row in generated.tolist():
        outputs.append(row[: row.index(EOS_ID)] if EOS_ID in row else [i for i in row if i])
    return outputs, scores


def ctranslate2_outputs(path, tokenizer, texts, beam_size, compute_type="default"):
    tokens = vocabulary(tokenizer)
    index = {token: i for i, token in enumerate(tokens)}
    translator = ctranslate2.Translator(path, device="cpu", intra_threads=2, compute_type=compute_type)
    batch = [[tokens[i] for i in row] for row in tokenizer.tokenize(texts).to_list()]
    # kseq's searches may end at once (an empty output) and do not normalize scores.
    results = translator.translate_batch(batch, beam_size=beam_size, length_penalty=0, min_decoding_length=0,
                                         max_decoding_length=MAX_STEPS, return_scores=True)
    return [[index[t] for t in r.hypotheses[0]] for r in results], np.array([r.scores[0] for r in results])


@pytest.mark.e2e
def test_a_trained_transformer_gives_ctranslate2_its_outputs_and_scores(tokenizer, tmp_path):
    model = reversal_model(tokenizer, share_embeddings=True)
    path = export_ctranslate2(model, tokenizer, tokenizer, str(tmp_path / "ct2"), assets=tokenizer.asset_files())
    assert path == str(tmp_path / "ct2" / "1")
    assert os.path.isfile(os.path.join(path, "spm.model"))
    texts = sentences(50, seed=2)

    kseq_ids, _ = kseq_outputs(model, tokenizer, texts, GreedySearch(MAX_STEPS))
    ct2_ids, _ = ctranslate2_outputs(path, tokenizer, texts, beam_size=1)
    assert ct2_ids == kseq_ids
    assert sum(len(ids) for ids in kseq_ids) > 2 * len(texts)  # real outputs, not EOS at once

    beams = BeamSearch(max_length=MAX_STEPS, beam_size=4, length_penalty=0.0)
    kseq_ids, kseq_scores = kseq_outputs(model, tokenizer, texts, beams)
    ct2_ids, ct2_scores = ctranslate2_outputs(path, tokenizer, texts, beam_size=4)
    assert ct2_ids == kseq_ids
    np.testing.assert_allclose(ct2_scores, kseq_scores, atol=1e-3)

    # Weights stored as int8 still translate these sentences alike. Computed
    # in float32 from the stored int8 weights and scales: CTranslate2's own
    # int8 matmuls depend on the CPU (they diverge on an AVX2 CPU without
    # AVX-512: benchmarks/RESULTS.md, Serving).
    int8_path = export_ctranslate2(model, tokenizer, tokenizer, str(tmp_path / "ct2"), quantization="int8")
    assert int8_path == str(tmp_path / "ct2" / "2")
    int8_ids, _ = ctranslate2_outputs(int8_path, tokenizer, texts, beam_size=4, compute_type="float32")
    assert sum(a == b for a, b in zip(int8_ids, kseq_ids)) >= 0.8 * len(texts)


@pytest.mark.parametrize("config", [
    {"norm_first": True, "position": "learned"},
    {"norm_first": False, "share_embeddings": False},
])
def test_pre_norm_learned_positions_and_separate_embeddings_convert_too(tokenizer, tmp_path, config):
    keras.utils.set_random_seed(3)
    size = tokenizer.vocab_size
    model = TransformerSeq2Seq(size, size, num_layers=2, d_model=32, num_heads=4, ff_dim=64, max_length=40,
                               **config)
    model.build()
    rng = np.random.default_rng(0)
    for variable in model.weights:  # untrained LayerNorms and biases are 1 and 0: make them count
        if variable.path.endswith(("gamma", "beta", "bias")):
            variable.assign(variable.numpy() + rng.normal(0, 0.3, variable.shape).astype("float32"))
    path = export_ctranslate2(model, tokenizer, tokenizer, str(tmp_path / "ct2"))
    texts = sentences(20, seed=4)
    kseq_ids, kseq_scores = kseq_outputs(model, tokenizer, texts, BeamSearch(MAX_STEPS, 4, length_penalty=0.0))
    ct2_ids, ct2_scores = ctranslate2_outputs(path, tokenizer, texts, beam_size=4)
    assert ct2_ids == kseq_ids
    np.testing.assert_allclose(ct2_scores, kseq_scores, atol=1e-3)


def test_a_recurrent_model_is_refused_by_name(tokenizer, tmp_path):
    model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=8, units=8)
    with pytest.raises(ValueError, match="RNNSeq2Seq has no CTranslate2 form"):
        export_ctranslate2(model, tokenizer, tokenizer, str(tmp_path / "ct2"))
    assert not os.path.exists(tmp_path / "ct2")


def test_a_tokenizer_of_another_size_and_an_unknown_quantization_are_refused(tokenizer, tmp_path):
    model = TransformerSeq2Seq(50, 50, num_layers=1, d_model=8, num_heads=2, ff_dim=8)
    model.build()
    expected = f"source tokenizer has {tokenizer.vocab_size} tokens; the model.s source vocabulary has 50"
    with pytest.raises(ValueError, match=expected):
        export_ctranslate2(model, tokenizer, tokenizer, str(tmp_path / "ct2"))
    with pytest.raises(ValueError, match="`quantization` must be one of"):
        export_ctranslate2(model, tokenizer, tokenizer, str(tmp_path / "ct2"), quantization="int4")
