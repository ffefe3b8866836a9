"""The loop shared by searches that pick one token per row per step."""

import tensorflow as tf

from kseq.decoding.constraints import apply_limits, suppress_special_tokens
from kseq.decoding.limits import search_limits
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID


class TokenSearch:
    """Base of GreedySearch and Sampler: one hypothesis per row.

    Subclasses choose the next token from the step's logits. The loop is a
    single `tf.while_loop` with fixed-shape variables, so it traces once,
    compiles under XLA and exports; it stops when every row has emitted EOS
    or after `max_length` tokens.

    Args:
        max_length: the most tokens to generate (a Python int).
        eos_id, no_repeat_ngram_size, max_ngram_count, max_length_ratio: the
            other limits (see `kseq.decoding.Limits`; `eos_id` -1 never ends
            a row: benchmarks use it to force full-length generation).
        limits: a `kseq.decoding.Limits` instead of the limits above.
    """

    def __init__(self, max_length: int | None = None, eos_id: int = EOS_ID, bos_id: int = BOS_ID, pad_id: int = PAD_ID,
                 no_repeat_ngram_size: int = 0, max_length_ratio: float | None = None, max_ngram_count: int = 1,
                 limits=None) -> None:
        self.limits = search_limits(limits, max_length, eos_id=eos_id, no_repeat_ngram_size=no_repeat_ngram_size,
                                    max_length_ratio=max_length_ratio, max_ngram_count=max_ngram_count)
        self.bos_id, self.pad_id = int(bos_id), int(pad_id)

    @property
    def max_length(self):
        """The most tokens a row generates, EOS included (`limits.max_length`)."""
        return self.limits.max_length

    def chooser(self):
        """Returns `choose(logits (B, V) float32, index) -> (B,) int32 tokens`,
        called once per search (a sampler draws its seed there)."""
        raise NotImplementedError

    def __call__(self, step_fn, state, batch_size, reorder_state=None, start_tokens=None,
                 length_limits=None, tile_state=None, select_rows=None):
        """Decodes a batch.

        Args:
            step_fn: `(token_ids (B,), state, index) -> (logits (B, V), state)`;
                `index` is the position of `token_ids` (0 for the first).
            state: the decoder state before the first step.
            batch_size: B (int or scalar tensor).
            reorder_state, tile_state, select_rows: unused (one hypothesis
                per row); accepted so that every search has the same call.
            start_tokens: (B,) int32 tokens fed at the first step (default
                BOS; a language model feeds each prompt's last token).
            length_limits: (B,) int32, the most tokens of each row (EOS
                included), or None (`max_length`).

        Returns:
            (ids, scores): ids (B, max_length) int32 with no BOS, EOS kept and
            PAD after EOS; scores (B,) float32, the sum of the model's token
            log-probabilities over each row's tokens.
        """
        del reorder_state, tile_state, select_rows
        length = self.max_length
        tokens = start_tokens if start_tokens is not None else tf.fill([batch_size], self.bos_id)
        tokens = tf.cast(tokens, tf.int32)
        finished = tf.zeros([batch_size], tf.bool)
        output = tf.fill([batch_size, length], tf.constant(self.pad_id, tf.int32))
        scores = tf.zeros([batch_size], tf.float32)
        positions = tf.range(length)
        choose = self.chooser()

        def keep_going(index, tokens, finished, output, scores, state):
            return tf.logical_and(index < length, tf.logical_not(tf.reduce_all(finished)))

        def body(index, tokens, finished, output, scores, state):
            logits, state = step_fn(tokens, state, index)
            logits = suppress_special_tokens(tf.cast(logits, tf.float32))
            allowed = apply_limits(logits, output, index, length_limits, self.limits)
            chosen = choose(allowed, index)
            log_probs = tf.gather(logits, chosen, batch_dims=1) - tf.reduce_logsumexp(logits, -1)
            scores += tf.where(finished, 0.0, log_probs)
            chosen = tf.where(finished, self.pad_id, chosen)
            # A masked write rather than a scatter: fixed shapes for XLA.
            output = tf.where(positions[None, :] == index, chosen[:, None], output)
            finished = tf.logical_or(finished, tf.equal(chosen, self.limits.eos_id))
            return index + 1, chosen, finished, output, scores, state

        _, _, _, output, scores, _ = tf.while_loop(
            keep_going, body, (tf.constant(0), tokens, finished, output, scores, state)
        )
        return output, scores

