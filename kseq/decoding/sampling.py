"""Sampling with temperature, top-k and nucleus (top-p) filtering."""

import tensorflow as tf

from kseq.decoding.token_search import TokenSearch
from kseq._validation import check_float, check_positive_int

_SEED_RANGE = 2**31 - 1


class Sampler(TokenSearch):
    """Draws each token from the model's (filtered) next-token distribution.

    The logits are divided by `temperature`, then cut to the `top_k` most
    likely tokens, then to the smallest set whose probability reaches
    `top_p`. Draws use stateless random ops keyed by (seed, step), so the same
    seed gives the same output (TensorFlow's stateless random ops draw
    different numbers under XLA than without it, so compiled and uncompiled
    runs each reproduce themselves); a row's draws depend on its batch.

    Args:
        max_length: the most tokens to generate (a Python int).
        temperature: > 0; below 1 sharpens, above 1 flattens. Defaults to 1.
        top_k: keep only the k most likely tokens (None: all).
        top_p: keep the most likely tokens up to cumulative probability p,
            in (0, 1] (None: all).
        seed: an int (or scalar int tensor) for reproducible draws; None draws
            a fresh seed at every call.
        eos_id: the id that ends a row (-1: never stop early).
        limits: a `kseq.decoding.Limits` instead of `max_length` and the
            other limits (`eos_id`, `no_repeat_ngram_size`, ...) as keywords.

    Example:
    >>> import tensorflow as tf
    >>> def step(tokens, state, index):
    ...     return tf.math.log([[0.1, 0.1, 0.1, 0.1, 0.2, 0.4]]), state
    >>> ids, _ = Sampler(max_length=3, top_k=1)(step, (), batch_size=1)
    >>> ids.numpy().tolist()  # top_k=1 is greedy
    [[5, 5, 5]]
    >>> same_seed = [Sampler(3, top_p=0.9, seed=7)(step, (), 4)[0] for _ in "ab"]
    >>> bool(tf.reduce_all(same_seed[0] == same_seed[1]))
    True

    References:
        Fan, Lewis and Dauphin, 2018 (top-k); Holtzman et al., 2020 (top-p).
    """

    def __init__(self, max_length: int | None = None, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, **kwargs) -> None:
        super().__init__(max_length, **kwargs)
        self.temperature = check_float("temperature", temperature, low=0.0, low_open=True)
        self.top_k = None if top_k is None else check_positive_int("top_k", top_k)
        self.top_p = None if top_p is None else check_float("top_p", top_p, 0.0, 1.0, low_open=True)
        if seed is not None and not tf.is_tensor(seed):
            seed = check_positive_int("seed", seed, allow_zero=True)
        self.seed = seed

    def filter_logits(self, logits):
        """Applies the temperature, then sets the tokens `top_k` and `top_p` filter out to -inf.

        Args:
            logits: (B, V) next-token logits.

        Returns:
            (B, V) logits.
        """
        logits = logits / self.temperature
        if self.top_k is not None and self.top_k < (logits.shape[-1] or self.top_k + 1):
            kth = tf.math.top_k(logits, self.top_k).values[:, -1:]
            logits = tf.where(logits < kth, -float("inf"), logits)
        if self.top_p is not None and self.top_p < 1.0:
            ordered = tf.sort(logits, axis=-1, direction="DESCENDING")
            mass_before = tf.math.cumsum(tf.nn.softmax(ordered), axis=-1, exclusive=True)
            # The most likely token always survives (its mass_before is 0).
            kept = tf.where(mass_before < self.top_p, ordered, float("inf"))
            logits = tf.where(logits < tf.reduce_min(kept, -1, keepdims=True), -float("inf"), logits)
        return logits

    def chooser(self):
        """Gives the function that draws each row's token.

        Called once per search; it draws the seed there when `seed` is None.

        Returns:
            `choose(logits (B, V) float32, index) -> (B,) int32 tokens`, drawn from
            the `filter_logits` distribution keyed by (seed, index).
        """
        if self.seed is None:
            seed = tf.random.uniform([], maxval=_SEED_RANGE, dtype=tf.int32)
        else:
            seed = tf.cast(self.seed, tf.int32)

        def choose(logits, index):
            draw = tf.random.stateless_categorical(
                self.filter_logits(logits), 1, seed=tf.stack([seed, index]), dtype=tf.int32
            )
            return draw[:, 0]

        return choose
