"""Generated tasks for tests, demos and smoke runs."""

import numpy as np

from kseq.special_ids import BOS_ID, EOS_ID, NUM_SPECIAL_IDS, PAD_ID


def pad_sequences(sequences, length=None):
    """Right-pads int sequences with PAD into one array.

    Args:
        sequences: N sequences of int ids.
        length: the array's width. Default None: the longest sequence's.

    Returns:
        An int32 (N, length) NumPy array.
    """
    length = length or max(len(s) for s in sequences)
    out = np.full((len(sequences), length), PAD_ID, np.int32)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = sequence
    return out


def teacher_forcing(sources, targets):
    """Makes model inputs and labels from id sequences (without specials).

    Args:
        sources: N source id sequences.
        targets: N target id sequences.

    Returns:
        ({"source_ids": (N, S), "target_ids": (N, T+1)}, labels (N, T+1)), int32:
        target_ids = BOS + target, labels = target + EOS, PAD elsewhere.
    """
    length = max(len(t) for t in targets) + 1
    inputs = {
        "source_ids": pad_sequences(sources),
        "target_ids": pad_sequences([[BOS_ID, *t] for t in targets], length),
    }
    return inputs, pad_sequences([[*t, EOS_ID] for t in targets], length)


def random_sequences(count, vocab_size=30, min_length=4, max_length=12, seed=0):
    """Draws `count` random id sequences over the non-special ids of `vocab_size`.

    Args:
        count: sequences to draw.
        vocab_size: V; ids are drawn from [4, V). Default 30.
        min_length: the shortest length. Default 4.
        max_length: the longest length, included. Default 12.
        seed: the NumPy generator's seed. Default 0.

    Returns:
        A list of lists of ints.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, count)
    return [rng.integers(NUM_SPECIAL_IDS, vocab_size, n).tolist() for n in lengths]


def reversal_task(count, vocab_size=30, min_length=4, max_length=12, seed=0):
    """Makes the reversal task: the source a random sequence of ids, the target the same sequence reversed.

    `reversed_words` is the same task as text.

    Args:
        count: examples to draw.
        vocab_size: V; ids are drawn from [4, V). Default 30.
        min_length: the shortest sequence. Default 4.
        max_length: the longest sequence, included. Default 12.
        seed: the NumPy generator's seed. Default 0.

    Returns:
        (inputs, labels, targets): the `teacher_forcing` arrays and the raw
        target sequences.
    """
    sources = random_sequences(count, vocab_size, min_length, max_length, seed)
    targets = [s[::-1] for s in sources]
    inputs, labels = teacher_forcing(sources, targets)
    return inputs, labels, targets


def reversed_words(count, letters="abcdefghijklmnopqrstuvwxyz", min_length=4, max_length=12, seed=0):
    """Makes the reversal task as text: random words of `letters`, and the same words reversed.

    The words are the `random_sequences` of `reversal_task`, the non-special
    id i spelled `letters[i - NUM_SPECIAL_IDS]`.

    Args:
        count: words to draw.
        letters: the alphabet. Default "a" to "z".
        min_length: the shortest word. Default 4.
        max_length: the longest word, included. Default 12.
        seed: the NumPy generator's seed. Default 0.

    Returns:
        (words, targets): two lists of `count` strings.

    Example:
    >>> words, targets = reversed_words(2, letters="ab", seed=1)
    >>> all(target == word[::-1] for word, target in zip(words, targets))
    True
    """
    sequences = random_sequences(count, NUM_SPECIAL_IDS + len(letters), min_length, max_length, seed)
    words = ["".join(letters[i - NUM_SPECIAL_IDS] for i in sequence) for sequence in sequences]
    return words, [word[::-1] for word in words]
