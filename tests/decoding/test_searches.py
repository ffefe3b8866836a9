"""Searches on hand-built step functions, checked against exhaustive search."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch, Sampler, n_best_search, trim_padding

EOS, PAD = 2, 0
VOCAB = 6  # PAD, BOS, EOS, then 3 real tokens (3, 4, 5); PAD/BOS are never chosen
PRIME = 9973


class PrefixTable:
    """A step function whose logits are a random function of the prefix.

    The state is a hash of the prefix, so the same prefix always gets the
    same logits whatever the batch, beam or order."""

    def __init__(self, seed, sharpness=2.0):
        self.table = np.random.default_rng(seed).normal(size=(PRIME, VOCAB)).astype("float32") * sharpness

    def initial_state(self, batch_size):
        return tf.zeros([batch_size], tf.int32)

    def __call__(self, tokens, state, index):
        logits = tf.gather(self.table, state)
        return logits, (state * 31 + tokens + 1) % PRIME

    def sequence_log_prob(self, sequence):
        state, token, total = 0, 1, 0.0
        for next_token in sequence:
            logits = self.table[state].astype("float64")
            logits[:2] = -np.inf
            total += logits[next_token] - np.log(np.exp(logits[2:]).sum())
            state, token = (state * 31 + token + 1) % PRIME, next_token
        return total


def all_hypotheses(max_length):
    """Every output a search can return: EOS-ended, or max_length long."""
    real = (3, 4, 5)
    for length in range(1, max_length + 1):
        for body in itertools.product(real, repeat=length - 1):
            yield body + (EOS,)
    yield from itertools.product(real, repeat=max_length)


def penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def exhaustive_best(table, max_length, alpha, count):
    scored = [
        (table.sequence_log_prob(h) / penalty(len(h), alpha), h) for h in all_hypotheses(max_length)
    ]
    return sorted(scored, key=lambda pair: -pair[0])[:count]


def as_list(ids):
    ids = [int(i) for i in ids]
    return tuple(ids[: ids.index(EOS) + 1] if EOS in ids else ids)


def run(search, table, batch_size=1):
    return search(table, table.initial_state(batch_size), batch_size)


def test_prefix_table_scores_match_the_search_scores():
    table = PrefixTable(0)
    ids, scores = run(GreedySearch(4), table)
    assert np.isclose(scores[0], table.sequence_log_prob(as_list(ids[0])), atol=1e-4)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5, -0.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_beam_finds_the_exhaustive_n_best(alpha, seed):
    """With K = 54, twice the 27 prefixes of length 3, no extension is ever
    pruned (all 36 length-3 candidates rank within K), so the result must be
    exactly the exhaustive ranking."""
    table, max_length = PrefixTable(seed), 4
    ids, scores = run(BeamSearch(max_length, beam_size=54, length_penalty=alpha, num_return=5), table)
    best = exhaustive_best(table, max_length, alpha, 5)
    assert [as_list(row) for row in ids[0]] == [h for _, h in best]
    assert np.allclose(scores[0], [s for s, _ in best], atol=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_small_beam_beats_or_matches_greedy_and_stays_sound(seed):
    table, max_length, alpha = PrefixTable(seed, sharpness=1.0), 5, 0.6
    ids, scores = run(BeamSearch(max_length, beam_size=3, length_penalty=alpha), table)
    hypothesis = as_list(ids[0, 0])
    # The reported score is the hypothesis' real penalised log-probability.
    expected = table.sequence_log_prob(hypothesis) / penalty(len(hypothesis), alpha)
    assert np.isclose(scores[0, 0], expected, atol=1e-4)
    assert PAD not in hypothesis and all(t in (2, 3, 4, 5) for t in hypothesis)
    best_score, _ = exhaustive_best(table, max_length, alpha, 1)[0]
    assert scores[0, 0] <= best_score + 1e-5


def test_beam_finds_what_greedy_misses():
    # Id 4 looks best first, but only 5 leads to a confident EOS.
    probabilities = np.full((VOCAB, VOCAB), 1e-9)
    probabilities[:, EOS] = 1.0
    probabilities[1, [EOS, 4, 5]] = [1e-9, 0.6, 0.4]  # after BOS
    probabilities[4, [EOS, 3, 4, 5]] = [0.25, 0.35, 0.2, 0.2]

    def step(tokens, state, index):
        return tf.gather(tf.math.log(probabilities.astype("float32")), tokens), state

    greedy, greedy_score = GreedySearch(3)(step, (), 1)
    beam, beam_score = BeamSearch(3, beam_size=2, length_penalty=0.0)(step, (), 1)
    assert as_list(greedy[0]) == (4, 3, EOS)
    assert as_list(beam[0, 0]) == (5, EOS)
    assert np.isclose(beam_score[0, 0], np.log(0.4), atol=1e-5)
    assert beam_score[0, 0] > greedy_score[0]


@pytest.mark.parametrize("seed", range(5))
def test_beam_of_one_is_greedy_without_penalty_and_never_worse_with_it(seed):
    table, max_length = PrefixTable(seed, sharpness=1.0), 6
    greedy, greedy_scores = run(GreedySearch(max_length), table, batch_size=1)
    plain, _ = run(BeamSearch(max_length, beam_size=1, length_penalty=0.0), table)
    assert np.array_equal(plain[:, 0], greedy)
    penalised, scores = run(BeamSearch(max_length, beam_size=1, length_penalty=1.0), table)
    greedy_length = len(as_list(greedy[0]))
    assert scores[0, 0] >= greedy_scores[0] / penalty(greedy_length, 1.0) - 1e-5


def test_n_best_search_keeps_what_decides_the_hypotheses():
    """A beam search keeps its limits, penalty and patience, widened to N
    beams where it has fewer; greedy becomes N beams without a penalty."""
    beam = BeamSearch(5, beam_size=2, length_penalty=1.5, patience=1.0, no_repeat_ngram_size=2)
    wide = n_best_search(beam, 3)
    assert (wide.beam_size, wide.num_return, wide.length_penalty, wide.patience) == (3, 3, 1.5, 1.0)
    assert wide.limits == beam.limits and wide.finished_to_stop == 3
    kept = n_best_search(BeamSearch(5, beam_size=4, length_penalty=0.6, patience=0.5), 2)
    assert (kept.beam_size, kept.num_return, kept.length_penalty, kept.finished_to_stop) == (4, 2, 0.6, 2)
    greedy = GreedySearch(6, no_repeat_ngram_size=2, max_ngram_count=2)
    ranked = n_best_search(greedy, 3)
    assert (ranked.beam_size, ranked.num_return, ranked.length_penalty, ranked.patience) == (3, 3, 0.0, None)
    assert ranked.limits == greedy.limits


@pytest.mark.parametrize("seed", range(3))
def test_the_n_best_of_greedy_are_scored_as_greedy_scores(seed):
    """n_best_search of a greedy search ranks by summed log-probability,
    greedy's own score; with one hypothesis it is greedy search."""
    table, greedy = PrefixTable(seed, sharpness=1.0), GreedySearch(6, no_repeat_ngram_size=2)
    ids, scores = run(n_best_search(greedy, 3), table)
    assert all(np.isclose(score, table.sequence_log_prob(as_list(row)), atol=1e-4)
               for row, score in zip(ids[0].numpy(), scores[0].numpy()))
    assert np.all(np.diff(scores[0].numpy()) <= 0), "best first"
    one, one_scores = run(n_best_search(greedy, 1), table)
    expected, expected_scores = run(greedy, table)
    assert np.array_equal(one[:, 0], expected)
    assert np.allclose(one_scores[:, 0], expected_scores, atol=1e-5)


def test_beam_stops_once_no_live_hypothesis_can_win():
    calls = []

    def step(tokens, state, index):  # EOS is almost certain at every step
        calls.append(int(index))
        logits = tf.one_hot(tf.fill(tf.shape(tokens), EOS), VOCAB) * 20.0
        return logits, state

    ids, _ = BeamSearch(50, beam_size=4, length_penalty=1.0)(step, (), 2)
    # After one step no alive hypothesis, even over the largest penalty it
    # could reach, can beat the finished EOS.
    assert calls == [0]
    assert [as_list(row) for row in ids[:, 0]] == [(EOS,), (EOS,)]


@pytest.mark.parametrize("num_return, with_limits, patience",
                         [(1, False, None), (3, True, None), (1, True, 1.0), (3, False, 1.0)])
def test_beam_search_that_drops_finished_rows_returns_the_same(num_return, with_limits, patience):
    table, batch, max_length = PrefixTable(3), 12, 8
    start = tf.range(batch) * 7 + 1  # a different prefix hash a row: rows end at different steps
    limits = tf.constant([3, 8, 5, 8, 2, 8, 6, 8, 4, 8, 7, 8]) if with_limits else None
    search = BeamSearch(max_length, beam_size=4, length_penalty=0.6, num_return=num_return, patience=patience)
    rows_run = {}

    def decode(select_rows, counts=None):
        def step(tokens, state, index):
            if counts is not None:  # eager: one call a step
                counts.append(int(tf.shape(tokens)[0]))
            return table(tokens, state, index)

        return search(step, start, batch, length_limits=limits, select_rows=select_rows)

    results = {}
    for name, select_rows in (("all rows", None), ("dropping", lambda state, rows: state)):
        rows_run[name] = []
        eager = decode(select_rows, rows_run[name])
        graph = tf.function(lambda: decode(select_rows))()
        for ids, scores in (eager, graph):
            assert ids.shape == (batch, num_return, max_length) and scores.shape == (batch, num_return)
        np.testing.assert_array_equal(eager[0], graph[0])
        results[name] = eager
    np.testing.assert_array_equal(results["dropping"][0], results["all rows"][0])
    np.testing.assert_allclose(results["dropping"][1], results["all rows"][1], rtol=1e-6)
    # The same number of steps, fewer rows in the later ones.
    assert len(rows_run["dropping"]) == len(rows_run["all rows"])
    assert rows_run["dropping"][0] == batch * 4 and sum(rows_run["dropping"]) < sum(rows_run["all rows"])


@pytest.mark.parametrize("patience, finished", [(1.0, 4), (0.5, 2), (0.25, 1)])
def test_beam_patience_stops_a_row_at_its_count_of_finished_hypotheses(patience, finished):
    table, batch, max_length = PrefixTable(5, sharpness=1.0), 10, 12
    start = tf.range(batch) * 11 + 3
    steps = {}
    for name, rule in (("bound", None), ("count", patience)):
        calls = []

        def step(tokens, state, index):
            calls.append(int(index))
            return table(tokens, state, index)

        ids, scores = BeamSearch(max_length, beam_size=4, length_penalty=1.0, patience=rule)(step, start, batch)
        steps[name] = len(calls)
        if rule is not None:
            counted = (ids, scores)
    assert BeamSearch(8, beam_size=4, patience=patience).finished_to_stop == finished
    assert steps["count"] < steps["bound"]
    # Each row's answer is the best of the hypotheses it had finished when it
    # stopped, whatever else the batch held: decoded alone, a row gets the same.
    for row in range(batch):
        alone = BeamSearch(max_length, beam_size=4, length_penalty=1.0, patience=patience)(
            table, start[row:row + 1], 1)
        np.testing.assert_array_equal(alone[0][0], counted[0][row])
        np.testing.assert_allclose(alone[1][0], counted[1][row], rtol=1e-6)


@pytest.mark.parametrize("patience", [0, -1.0, 1.5])
def test_beam_patience_outside_0_1_is_refused_by_name(patience):
    with pytest.raises(ValueError, match="`patience` must be in"):
        BeamSearch(8, beam_size=4, patience=patience)


def test_greedy_stops_at_eos_and_pads_after_it():
    calls = []

    def step(tokens, state, index):  # row r emits EOS at step r, else id 4
        calls.append(int(index))
        emit = tf.where(tf.range(3) == index, EOS, 4)
        return tf.one_hot(emit, VOCAB), state

    ids, _ = GreedySearch(10)(step, (), 3)
    assert calls == [0, 1, 2], "the loop ends once every row has emitted EOS"
    assert ids.shape == (3, 10)
    assert ids.numpy()[:, :4].tolist() == [[2, 0, 0, 0], [4, 2, 0, 0], [4, 4, 2, 0]]
    assert np.all(ids.numpy()[:, 3:] == PAD)
    assert trim_padding(ids).numpy().tolist() == [[2, 0, 0], [4, 2, 0], [4, 4, 2]]


def test_eos_id_minus_one_runs_to_max_length():
    ids, _ = GreedySearch(7, eos_id=-1)(lambda t, s, i: (tf.one_hot(tf.fill([2], EOS), VOCAB), s), (), 2)
    assert np.all(ids.numpy() == EOS)


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = tf.math.log([[1e-9, 1e-9, 0.1, 0.4, 0.3, 0.2]])
    finite = lambda sampler: np.flatnonzero(np.isfinite(sampler.filter_logits(logits)[0])).tolist()
    assert finite(Sampler(3, top_k=2)) == [3, 4]
    assert finite(Sampler(3, top_p=0.5)) == [3, 4]  # 0.4 < 0.5, then 0.7 >= 0.5
    assert finite(Sampler(3, top_p=0.35)) == [3]
    assert finite(Sampler(3, top_p=0.95)) == [2, 3, 4, 5]
    assert finite(Sampler(3, top_k=3, top_p=0.7)) == [3, 4]


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_sample_frequencies_follow_the_tempered_distribution(temperature):
    logits = np.log(np.array([1e-9, 1e-9, 0.1, 0.4, 0.3, 0.2], "float32"))
    draws = 8000
    step = lambda tokens, state, index: (tf.tile(logits[None], [draws, 1]), state)
    ids, _ = Sampler(1, temperature=temperature, seed=3)(step, (), draws)
    counts = np.bincount(ids.numpy()[:, 0], minlength=VOCAB)[2:] / draws
    expected = np.exp(logits[2:] / temperature)
    expected /= expected.sum()
    # 4 standard errors of a proportion at n = 8000 is at most 0.023.
    assert np.allclose(counts, expected, atol=0.023), (counts, expected)


def test_sampling_is_reproducible_by_seed_and_top_k_1_is_greedy():
    table = PrefixTable(4, sharpness=0.5)
    first, _ = run(Sampler(8, seed=11), table, batch_size=16)
    again, _ = run(Sampler(8, seed=11), table, batch_size=16)
    other, _ = run(Sampler(8, seed=12), table, batch_size=16)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    greedy, _ = run(GreedySearch(8), table, batch_size=16)
    top_1, _ = run(Sampler(8, top_k=1, seed=5), table, batch_size=16)
    assert np.array_equal(top_1, greedy)


@pytest.mark.parametrize(
    "search",
    [GreedySearch(6), BeamSearch(6, beam_size=3, num_return=2), BeamSearch(6, beam_size=3, patience=1.0),
     Sampler(6, top_p=0.9, seed=2)],
    ids=["greedy", "beam", "beam-patience", "sample"],
)
def test_searches_trace_once_and_compile_under_xla(search):
    table = PrefixTable(5)
    eager = run(search, table, batch_size=4)
    traces = []

    @tf.function(jit_compile=True)
    def compiled(batch_size_vector):
        traces.append(1)
        batch_size = tf.shape(batch_size_vector)[0]
        return search(table, table.initial_state(batch_size), batch_size)

    first, outputs = compiled(tf.zeros([4])), compiled(tf.zeros([4]))
    assert len(traces) == 1
    assert np.array_equal(outputs[0], first[0])
    if not isinstance(search, Sampler):  # XLA draws other random numbers
        assert np.array_equal(outputs[0], eager[0])
        assert np.allclose(outputs[1], eager[1], atol=1e-5)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: BeamSearch(5, beam_size=0), "`beam_size` must be >= 1"),
        (lambda: BeamSearch(5, beam_size=2, num_return=3), "`num_return` \\(3\\) must be <="),
        (lambda: BeamSearch(5, length_penalty=float("nan")), "`length_penalty` must be a finite"),
        (lambda: Sampler(5, temperature=0), "`temperature` must be a finite number in \\(0"),
        (lambda: Sampler(5, top_p=1.5), "`top_p` must be a finite number in \\(0"),
        (lambda: Sampler(5, top_k=0), "`top_k` must be >= 1"),
        (lambda: Sampler(5, seed=-1), "`seed` must be >= 0"),
        (lambda: GreedySearch(0), "`max_length` must be >= 1"),
        (lambda: n_best_search(GreedySearch(5), 0), "`n_best` must be >= 1"),
    ],
)
def test_bad_search_options_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()
