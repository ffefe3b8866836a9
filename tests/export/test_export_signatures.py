"""What a serving client needs from a translator's export beyond the text:
the score, the n best, the alignment, the score of given pairs, and TF
Serving's warm-up requests; and `model.score` in Python."""

import string

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the text ops the exports use)

from kseq.data import CharacterTokenizer
from kseq.decoding import BeamSearch, GreedySearch, Limits
from kseq.export import export_translator
from kseq.export.warmup import read_warmup_requests
from support import small_model

TOKENIZER = CharacterTokenizer(string.ascii_lowercase)
SOURCES = ["keras", "seq", "", "abcabc"]


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def exported(request, tmp_path_factory):
    keras.utils.set_random_seed(3)
    model = small_model(request.param, {"attention": "dot"} if request.param == "rnn" else {})
    search = BeamSearch(limits=Limits(12), beam_size=3, length_penalty=0.6)
    path = export_translator(model, TOKENIZER, TOKENIZER, str(tmp_path_factory.mktemp("t") / "translate"),
                             search=search, n_best=2)
    return model, search, tf.saved_model.load(path).signatures, path


def ids(texts):
    return TOKENIZER.tokenize(texts).to_tensor()


def test_the_translation_comes_with_its_score(exported):
    model, search, signatures, _ = exported
    served = signatures["serving_default"](source=tf.constant(SOURCES))
    expected_ids, expected_scores = model.generate(ids(SOURCES), search=search, return_scores=True)
    assert served["score"].shape == (len(SOURCES),)
    np.testing.assert_allclose(served["score"].numpy(), expected_scores.numpy(), rtol=1e-5, atol=1e-5)
    assert served["token_ids"].numpy().tolist() == expected_ids.numpy().tolist()


def test_the_n_best_are_the_beams_best_first(exported):
    model, search, signatures, _ = exported
    served = signatures["n_best"](source=tf.constant(SOURCES))
    assert served["translations"].shape == (len(SOURCES), 2) and served["scores"].shape == (len(SOURCES), 2)
    scores = served["scores"].numpy()
    assert np.all(scores[:, 0] >= scores[:, 1])
    best = signatures["serving_default"](source=tf.constant(SOURCES))
    assert served["translations"].numpy()[:, 0].tolist() == best["translation"].numpy().tolist()
    np.testing.assert_allclose(scores[:, 0], best["score"].numpy(), rtol=1e-5, atol=1e-5)
    two = model.generate(ids(SOURCES), search=BeamSearch(limits=search.limits, beam_size=3, num_return=2),
                         return_scores=True)
    np.testing.assert_allclose(scores, two[1].numpy(), rtol=1e-5, atol=1e-5)


def test_a_greedy_exports_n_best_starts_with_its_translation(tmp_path):
    """serving_default greedy, n_best 3: the greedy translation and score
    first, then the others of a beam of 3 without a length penalty, all
    scored as greedy scores (the summed log-probability); the alignment
    aligns the greedy translation."""
    keras.utils.set_random_seed(5)
    model = small_model("rnn", {"attention": "dot"}, dropout=0.0)
    path = export_translator(model, TOKENIZER, TOKENIZER, str(tmp_path / "greedy"),
                             search=GreedySearch(limits=Limits(10, no_repeat_ngram_size=2, max_length_ratio=0.5)),
                             n_best=3)
    signatures = tf.saved_model.load(path).signatures
    sources = tf.constant(SOURCES + ["zyxwvu", "the cat sat"])
    best, n_best, aligned = (signatures[name](source=sources) for name in ("serving_default", "n_best", "alignment"))
    assert n_best["translations"].numpy()[:, 0].tolist() == best["translation"].numpy().tolist()
    assert n_best["scores"].numpy()[:, 0].tolist() == best["score"].numpy().tolist()
    assert aligned["token_ids"].numpy().tolist() == best["token_ids"].numpy().tolist()
    ids = n_best["token_ids"].numpy()
    blank = SOURCES.index("")  # every hypothesis of a blank source is the empty one
    assert all(len({tuple(hypothesis) for hypothesis in row}) == 3 for row in np.delete(ids, blank, 0)), \
        "the translation once, then two others"
    source_ids = tf.pad(ids_of(sources.numpy()), [[0, 0], [0, 1]])  # a blank source keeps a column
    for rank in range(3):
        ended = (ids[:, rank] == 2).any(axis=1)  # model.score counts an EOS; the length ratio ends most rows
        ended[blank] = False  # a blank source's empty answer scores 0
        assert ended.sum() >= 4, rank
        expected = model.score(source_ids, np.where(ids[:, rank] == 2, 0, ids[:, rank]))
        np.testing.assert_allclose(n_best["scores"].numpy()[ended, rank], expected.numpy()[ended], rtol=1e-4,
                                   atol=1e-4)
    assert np.all(np.diff(n_best["scores"].numpy()[:, 1:], axis=1) <= 0), "the others best first"


def ids_of(texts):
    return TOKENIZER.tokenize([text.decode() for text in texts]).to_tensor()


def test_the_alignment_is_the_most_attended_source_position(exported):
    model, _, signatures, _ = exported
    served = signatures["alignment"](source=tf.constant(SOURCES[:2]))
    output = served["token_ids"].numpy()
    translated = signatures["serving_default"](source=tf.constant(SOURCES[:2]))
    assert output.tolist() == translated["token_ids"].numpy().tolist(), "the translation's search aligned"
    bos = np.ones((len(output), 1), "int32")
    weights = np.asarray(model.attention_weights(
        {"source_ids": ids(SOURCES[:2]), "target_ids": np.concatenate([bos, output[:, :-1]], 1)}))
    expected = np.where(output == 0, -1, weights.argmax(-1))
    assert served["alignment"].numpy().tolist() == expected.tolist()
    lengths = (ids(SOURCES[:2]).numpy() != 0).sum(1)
    assert all(0 <= a < n for row, n in zip(served["alignment"].numpy(), lengths) for a in row if a >= 0)


def test_the_score_signature_is_forced_decoding(exported):
    model, search, signatures, _ = exported
    targets = ["sarek", "", "qes", "cbacba"]
    served = signatures["score"](source=tf.constant(SOURCES), target=tf.constant(targets))
    expected = model.score(ids(SOURCES), ids(targets))
    np.testing.assert_allclose(served["log_probability"].numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert np.all(served["log_probability"].numpy() < 0)


def test_model_score_of_a_greedy_output_is_what_generate_scored():
    keras.utils.set_random_seed(0)
    compared = 0
    for kind, config in (("transformer", {}), ("rnn", {"attention": "general"}), ("rnn", {})):
        model = small_model(kind, config, dropout=0.0)
        source = np.random.default_rng(1).integers(4, 30, (8, 6)).astype("int32")
        output, scores = model.generate(source, max_length=20, return_scores=True)
        output = output.numpy()
        ended = (output == 2).any(axis=1)
        targets = np.where(output == 2, 0, output)  # score counts the EOS itself
        mine = model.score(source, targets).numpy()
        np.testing.assert_allclose(mine[ended], scores.numpy()[ended], rtol=1e-4, atol=1e-4)
        compared += int(ended.sum())
    assert compared > 0, "some greedy outputs ended with EOS"


def test_model_score_checks_its_targets():
    model = small_model("rnn", {})
    with pytest.raises(ValueError, match="target_ids"):
        model.score(np.array([[4, 5]]), np.array([[4, 500]]))


def test_warmup_requests_run_against_every_signature(exported):
    _, _, signatures, path = exported
    requests = read_warmup_requests(path)
    assert sorted(name for name, _ in requests) == sorted(signatures)
    for name, inputs in requests:
        outputs = signatures[name](**{key: tf.constant(value) for key, value in inputs.items()})
        assert outputs and all(value.shape[0] == 1 for value in outputs.values()), name


def test_a_beam_that_holds_the_n_best_serves_both_from_one_search(tmp_path, monkeypatch):
    """A beam of N that stops a row at N finished hypotheses (patience 1)
    finds the same translation whether it returns one hypothesis or N: the
    export traces that one search, and `n_best` reads its N."""
    keras.utils.set_random_seed(5)
    model = small_model("transformer", {})
    search = BeamSearch(limits=Limits(12), beam_size=4, length_penalty=1.0, patience=1.0)
    traces, search_once = [], BeamSearch.__call__
    monkeypatch.setattr(BeamSearch, "__call__", lambda *args, **kwargs: traces.append(1) or search_once(*args, **kwargs))
    path = export_translator(model, TOKENIZER, TOKENIZER, str(tmp_path / "m"), search=search, n_best=4)
    monkeypatch.undo()
    assert len(traces) == 1, "serving_default, n_best and alignment share one traced search"
    signatures = tf.saved_model.load(path).signatures
    sources = tf.constant(SOURCES)
    best, n_best, aligned = (signatures[name](source=sources) for name in ("serving_default", "n_best", "alignment"))
    assert n_best["translations"].numpy()[:, 0].tolist() == best["translation"].numpy().tolist()
    assert n_best["scores"].numpy()[:, 0].tolist() == best["score"].numpy().tolist()
    assert aligned["token_ids"].numpy().tolist() == best["token_ids"].numpy().tolist()
    four = BeamSearch(limits=search.limits, beam_size=4, length_penalty=1.0, patience=1.0, num_return=4)
    expected_ids, expected_scores = model.generate(ids(SOURCES), search=four, return_scores=True)
    np.testing.assert_allclose(n_best["scores"].numpy(), expected_scores.numpy(), rtol=1e-5, atol=1e-5)
    served = n_best["token_ids"].numpy()
    expected = expected_ids.numpy()
    assert served.tolist() == expected[:, :, : served.shape[2]].tolist() and not expected[:, :, served.shape[2]:].any()
