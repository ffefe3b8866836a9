"""no_repeat_ngram_size: every search, checked against plain Python."""

import numpy as np
import pytest
import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch, Sampler
from kseq.decoding.constraints import repeated_ngram_tokens
from test_searches import EOS, VOCAB, PrefixTable, all_hypotheses, as_list, penalty, run

SEARCHES = {
    "greedy": lambda n, length=8, **options: GreedySearch(length, no_repeat_ngram_size=n, **options),
    "beam": lambda n, length=8, **options: BeamSearch(length, beam_size=3, no_repeat_ngram_size=n,
                                                      **options),
    "sample": lambda n, length=8, **options: Sampler(length, seed=3, no_repeat_ngram_size=n, **options),
}


def most_ngram_occurrences(tokens, size):
    grams = [tuple(tokens[i:i + size]) for i in range(len(tokens) - size + 1)]
    return max((grams.count(gram) for gram in grams), default=0)


def repeats_an_ngram(tokens, size):
    return most_ngram_occurrences(tokens, size) > 1


def looping_step(tokens, state, index):
    """Prefers 3 -> 4 -> 3 -> ... by far (sampling loops too), EOS least."""
    logits = np.full((VOCAB, VOCAB), -8.0, "float32")
    logits[:, 3], logits[3, 4], logits[4, 3] = 8.0, 16.0, 16.0
    logits[:, 5], logits[:, EOS] = 4.0, 0.0
    return tf.gather(logits, tokens), state


def best_ids(ids):
    return ids[:, 0] if ids.shape.rank == 3 else ids


@pytest.mark.parametrize("method", SEARCHES)
def test_a_looping_model_loops_without_the_constraint_and_not_with_it(method):
    looped = as_list(best_ids(SEARCHES[method](0)(looping_step, (), 1)[0])[0])
    assert repeats_an_ngram(looped, 3)  # the control: it does loop
    for size in (1, 2, 3):
        ids, scores = SEARCHES[method](size)(looping_step, (), 1)
        output = as_list(best_ids(ids)[0])
        assert not repeats_an_ngram(output, size), (size, output)
        assert np.all(np.isfinite(scores))


@pytest.mark.parametrize("method", SEARCHES)
@pytest.mark.parametrize("size, count", [(1, 2), (2, 2), (3, 2), (2, 3)])
def test_an_ngram_comes_back_at_most_max_ngram_count_times(method, size, count):
    """The loop guard: a looping model's n-grams may recur, up to `count`
    times (beam search may rank ending at once higher than a cut loop)."""
    ids, _ = SEARCHES[method](size, length=16, max_ngram_count=count)(looping_step, (), 1)
    output = as_list(best_ids(ids)[0])
    if method == "beam":
        assert most_ngram_occurrences(output, size) <= count, output
    else:
        assert most_ngram_occurrences(output, size) == count, output


def reference_banned(history, size, max_count=1):
    """Tokens that would make an n-gram occur more than `max_count` times
    after `history`, by listing them."""
    if len(history) < size - 1:
        return set()
    suffix = tuple(history[len(history) - size + 1:]) if size > 1 else ()
    following = [history[i + size - 1] for i in range(len(history) - size + 1)
                 if tuple(history[i:i + size - 1]) == suffix]
    return {token for token in following if following.count(token) >= max_count}


@pytest.mark.parametrize("size, max_count", [(1, 1), (2, 1), (3, 1), (4, 1), (1, 2), (2, 2), (3, 3)])
def test_banned_tokens_match_a_listing_at_every_position(size, max_count):
    rng = np.random.default_rng(size)
    history = rng.integers(3, 6, (16, 10)).astype("int32")
    for index in range(11):
        banned = repeated_ngram_tokens(tf.constant(history), index, size, VOCAB, max_count).numpy()
        for row in range(len(history)):
            expected = reference_banned(list(history[row, :index]), size, max_count)
            assert set(np.flatnonzero(banned[row])) == expected, (row, index)


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_picks_the_best_allowed_token_at_every_step(size, seed):
    table = PrefixTable(seed)
    ids, _ = run(GreedySearch(8, no_repeat_ngram_size=size), table, batch_size=1)
    history, state, token = [], 0, 1
    for _ in range(8):
        logits = table.table[state].copy()
        logits[[0, 1] + sorted(reference_banned(history, size))] = -np.inf
        state, token = (state * 31 + token + 1) % 9973, int(np.argmax(logits))
        history.append(token)
        if token == EOS:
            break
    assert list(as_list(ids[0])) == history


@pytest.mark.parametrize("size, count", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_beam_finds_the_exhaustive_best_among_allowed_hypotheses(size, count, seed):
    table, max_length, alpha = PrefixTable(seed), 4, 0.6
    ids, scores = run(BeamSearch(max_length, beam_size=54, length_penalty=alpha, num_return=3,
                                 no_repeat_ngram_size=size, max_ngram_count=count), table)
    allowed = [h for h in all_hypotheses(max_length) if most_ngram_occurrences(h, size) <= count]
    best = sorted(((table.sequence_log_prob(h) / penalty(len(h), alpha), h) for h in allowed),
                  key=lambda pair: -pair[0])[:3]
    assert [as_list(row) for row in ids[0]] == [h for _, h in best]
    assert np.allclose(scores[0], [s for s, _ in best], atol=1e-4)


@pytest.mark.parametrize("method", SEARCHES)
def test_constrained_searches_compile_under_xla(method):
    search, table = SEARCHES[method](2), PrefixTable(4)
    eager = run(search, table, batch_size=4)

    @tf.function(jit_compile=True)
    def compiled(batch_size_vector):
        batch_size = tf.shape(batch_size_vector)[0]
        return search(table, table.initial_state(batch_size), batch_size)

    ids = compiled(tf.zeros([4]))[0]
    for row in best_ids(ids).numpy():
        assert not repeats_an_ngram(as_list(row), 2)
    if method != "sample":  # XLA draws other random numbers
        assert np.array_equal(ids, eager[0])


@pytest.mark.parametrize("make, name", [
    (lambda: GreedySearch(5, no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
    (lambda: BeamSearch(5, no_repeat_ngram_size=1.5), "no_repeat_ngram_size"),
    (lambda: Sampler(5, no_repeat_ngram_size=2, max_ngram_count=0), "max_ngram_count"),
    (lambda: BeamSearch(5, no_repeat_ngram_size=2, max_ngram_count=1.5), "max_ngram_count"),
])
def test_a_bad_ngram_option_is_named(make, name):
    with pytest.raises((ValueError, TypeError), match=name):
        make()
