"""Generated tasks for tests, demos and smoke runs."""

import numpy as np

from kseq.special_ids import BOS_ID, EOS_ID, NUM_SPECIAL_IDS, PAD_ID


def pad_sequences(sequences, length=None):
    """Right-pads int sequences with PAD into an int32 (N, length) array."""
    length = length or max(len(s) for s in sequences)
    out = np.full((len(sequences), length), PAD_ID, np.int32)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = sequence
    return out


def teacher_forcing(sources, targets):
    """Model inputs and labels from id sequences (without specials).

    Returns:
        ({"source_ids": (N, S), "target_ids": (N, T+1)}, labels (N, T+1)):
        target_ids = BOS + target, labels = target + EOS, PAD elsewhere.
    """
    length = max(len(t) for t in targets) + 1
    inputs = {
        "source_ids": pad_sequences(sources),
        "target_ids": pad_sequences([[BOS_ID, *t] for t in targets], length),
    }
    return inputs, pad_sequences([[*t, EOS_ID] for t in targets], length)


def random_sequences(count, vocab_size=30, min_length=4, max_length=12, seed=0):
    """`count` random id sequences over the non-special ids of `vocab_size`."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, count)
    return [rng.integers(NUM_SPECIAL_IDS, vocab_size, n).tolist() for n in lengths]


def reversal_task(count, vocab_size=30, min_length=4, max_length=12, seed=0):
    """Source: a random sequence of ids; target: the same sequence reversed
    (`reversed_words` is the same task as text).

    Returns the `teacher_forcing` arrays plus the raw target sequences.
    """
    sources = random_sequences(count, vocab_size, min_length, max_length, seed)
    targets = [s[::-1] for s in sources]
    inputs, labels = teacher_forcing(sources, targets)
    return inputs, labels, targets


def reversed_words(count, letters="abcdefghijklmnopqrstuvwxyz", min_length=4, max_length=12, seed=0):
    """The reversal task as text: (`count` random words of `letters`, each
    `min_length` to `max_length` long; the same words reversed): the
    `random_sequences` of `reversal_task`, the non-special id i spelled
    `letters[i - NUM_SPECIAL_IDS]`.

    Example:
    >>> words, targets = reversed_words(2, letters="ab", seed=1)
    >>> all(target == word[::-1] for word, target in zip(words, targets))
    True
    """
    sequences = random_sequences(count, NUM_SPECIAL_IDS + len(letters), min_length, max_length, seed)
    words = ["".join(letters[i - NUM_SPECIAL_IDS] for i in sequence) for sequence in sequences]
    return words, [word[::-1] for word in words]
