"""What RNNSeq2Seq and TransformerSeq2Seq share: inputs, decoding, plots."""

import tensorflow as tf
from keras import ops

from kseq.decoding.constraints import source_length_limits, suppress_special_tokens
from kseq.layers.masking import padding_mask
from kseq.models.base import KseqModel, check_vocab_size
from kseq.models.generator import Generator
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID
from kseq._validation import check_token_ids


class Seq2Seq(Generator, KseqModel):
    """Base of the encoder-decoder models.

    Subclasses implement `encode(source_ids, training=False)` -> encoder
    outputs (a dict), `initial_state(encoder_outputs, source_padding_mask,
    max_length=None)` -> the decoder state (a nest of batch-major tensors,
    source included) and the decoder protocol's `step_with_attention`
    (kseq.decoding.Decoder); this class turns them into `begin_decoding`,
    `generate`, `search` and `attention_weights`.

    Args:
        source_vocab_size: V of the sources, counting the special ids 0-3.
        target_vocab_size: V of the targets, counting the special ids 0-3.
        **kwargs: keras.Model's arguments, e.g. `name`.

    Raises:
        ValueError: if a vocabulary size is not an int over 4.
    """

    config_names = ("source_vocab_size", "target_vocab_size")
    output_vocab_name = "target_vocab_size"
    input_name = "source_ids"
    has_attention = True  # False for a context-vector RNN model

    def __init__(self, source_vocab_size: int, target_vocab_size: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.source_vocab_size = check_vocab_size("source_vocab_size", source_vocab_size)
        self.target_vocab_size = check_vocab_size("target_vocab_size", target_vocab_size)

    @property
    def output_vocab_size(self):
        return self.target_vocab_size

    def _check_prompt(self, source_ids):
        return self._check_source(source_ids)

    def begin_decoding(self, source_ids, max_length):
        """Encodes the sources and gives the decoder state before the first step.

        Args:
            source_ids: (B, S) int ids, right-padded with PAD.
            max_length: the most tokens the search generates, which sizes a
                state of fixed shapes; None lets the state grow.

        Returns:
            (state, start_tokens): the decoder state, and (B,) int32 BOS ids.
        """
        encoded = self.encode(source_ids, training=False)
        state = self.initial_state(encoded, padding_mask(source_ids), max_length=max_length)
        return state, tf.fill(tf.shape(source_ids)[:1], BOS_ID)

    def length_limits(self, source_ids, search):
        """Gives each row's length limit from its source length, if the search asks for one.

        Only when the search's limits have a `max_length_ratio`: it stops a
        looping output early, and its cost.

        Args:
            source_ids: (B, S) int ids, right-padded with PAD.
            search: a kseq.decoding search, whose `limits` are read.

        Returns:
            (B,) int32 limits (`kseq.decoding.constraints.source_length_limits`),
            or None without a `max_length_ratio`.
        """
        if search.limits.max_length_ratio is None:
            return None
        return source_length_limits(source_ids, search.limits)

    def finish_search(self, source_ids, ids, scores):
        """Makes a source with no tokens (all PAD, e.g. an empty string) translate to nothing.

        Its row becomes EOS at once, then PAD, with score 0.

        Args:
            source_ids: (B, S) the sources searched from.
            ids: the search's ids, (B, L) or (B, N, L).
            scores: the search's scores, (B,) or (B, N).

        Returns:
            (ids, scores), of the same shapes.
        """
        return _end_empty_sources(ids, scores, tf.reduce_any(padding_mask(source_ids), axis=1))

    def _check_source(self, source_ids):
        return check_token_ids(
            source_ids, "source_ids", self.source_vocab_size, self.length_limit
        )

    def _split_inputs(self, inputs):
        """Checks `{"source_ids", "target_ids"}` and returns the two id tensors."""
        if not isinstance(inputs, dict) or not {"source_ids", "target_ids"} <= set(inputs):
            got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                "Model inputs must be a dict with keys 'source_ids' (B, S) and "
                f"'target_ids' (B, T); got {got}."
            )
        source_ids = check_token_ids(inputs["source_ids"], "source_ids", self.source_vocab_size,
                                     self.length_limit)
        target_ids = check_token_ids(inputs["target_ids"], "target_ids", self.target_vocab_size,
                                     self.length_limit)
        source_batch, target_batch = source_ids.shape[0], target_ids.shape[0]
        if None not in (source_batch, target_batch) and source_batch != target_batch:
            raise ValueError(
                f"`source_ids` and `target_ids` must have the same batch size; "
                f"got {source_batch} and {target_batch}."
            )
        return source_ids, target_ids

    def score(self, source_ids, target_ids):
        """Scores targets given their sources: log P(target | source) by forced decoding.

        The log-probabilities of each target's tokens and of its EOS, summed;
        as the searches score (PAD and BOS, never generated, take no
        probability), so a greedy output scores what `generate` says.

        Args:
            source_ids: (B, S) int ids, right-padded with PAD.
            target_ids: (B, T) int ids of the targets without BOS or EOS,
                right-padded with PAD (an all-PAD row scores EOS alone).

        Returns:
            (B,) float32 log-probabilities.

        Raises:
            ValueError: if the ids are not a (B, L) integer batch within the vocabularies.

        Example:
        >>> import numpy as np
        >>> model = kseq.models.TransformerSeq2Seq(10, 10, num_layers=1, d_model=8, num_heads=2, ff_dim=8)
        >>> scores = model.score(np.array([[4, 5], [6, 0]]), np.array([[7, 8, 9], [7, 0, 0]]))
        >>> scores.shape, bool(np.all(scores.numpy() < 0))
        (TensorShape([2]), True)
        """
        source_ids = self._check_source(source_ids)
        target = tf.cast(check_token_ids(target_ids, "target_ids", self.target_vocab_size), tf.int32)
        self._ensure_built()
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(target, PAD_ID), tf.int32), axis=1)
        positions = tf.range(tf.shape(target)[1] + 1)[None, :]
        labels = tf.pad(target, [[0, 0], [0, 1]])
        labels = tf.where(positions == lengths[:, None], EOS_ID, labels)  # target + EOS
        decoder_in = tf.pad(target, [[0, 0], [1, 0]], constant_values=BOS_ID)  # BOS + target
        logits = self({"source_ids": source_ids, "target_ids": decoder_in}, training=False)
        log_probs = tf.nn.log_softmax(suppress_special_tokens(tf.cast(logits, tf.float32)))
        token_log_probs = tf.gather(log_probs, labels, batch_dims=2)
        return tf.reduce_sum(tf.where(positions <= lengths[:, None], token_log_probs, 0.0), axis=1)

    def alignment(self, source_ids, output_ids):
        """Aligns each output token with the source position its decoding step attends to most.

        For the Transformer, the attention is the last cross-attention layer
        averaged over heads. In TensorFlow ops (one `tf.while_loop` over the
        steps), so exports serve it.

        Args:
            source_ids: (B, S) int ids, right-padded with PAD.
            output_ids: (B, L) ids from a search: no BOS, PAD after EOS.

        Returns:
            (B, L) int32 source positions, -1 on padding.

        Raises:
            ValueError: if the model has no attention (attention=None).
        """
        if not self.has_attention:
            raise ValueError("alignment needs a model with attention; attention=None.")
        length = output_ids.shape[1]
        state, tokens = self.begin_decoding(source_ids, max_length=length)
        inputs = tf.concat([tokens[:, None], tf.cast(output_ids[:, :-1], tf.int32)], axis=1)  # BOS + outputs

        def step(index, state, argmax):
            _, state, attention = self.step_with_attention(inputs[:, index], state, index)
            best = tf.argmax(tf.cast(attention, tf.float32), axis=-1, output_type=tf.int32)
            return index + 1, state, argmax.write(index, best)

        argmax = tf.TensorArray(tf.int32, size=length)
        _, _, argmax = tf.while_loop(lambda index, *_: index < length, step, (tf.constant(0), state, argmax))
        return tf.where(tf.equal(output_ids, PAD_ID), -1, tf.transpose(argmax.stack()))

    def attention_weights(self, inputs):
        """Gives the decoder-to-source attention of a teacher-forced pass.

        Rows sum to 1 over the source and are 0 on source padding. For the
        Transformer: the last decoder layer, averaged over heads. Computed
        by the decoding steps themselves (`attention_by_steps`: called
        eagerly, one traced loop kept for any batch and length).

        Args:
            inputs: {"source_ids": (B, S), "target_ids": (B, T)} int ids, the
                targets as the decoder reads them (BOS first).

        Returns:
            (B, T, S) attention weights.

        Raises:
            ValueError: if `inputs` is not such a dict, or the model has no attention.
        """
        source_ids, target_ids = self._split_inputs(inputs)
        self._ensure_built()
        if not self.has_attention:
            raise ValueError("attention_weights needs a model with attention; attention=None.")
        if source_ids.shape[0] == 0:  # (0, T, S)
            return ops.zeros((0, target_ids.shape[1], source_ids.shape[1]), self.compute_dtype)
        return self.attention_by_steps(source_ids, target_ids)


def _end_empty_sources(ids, scores, has_tokens):
    """Rows without source tokens -> EOS then PAD, score 0. ids (B, L) or
    (B, N, L), scores (B,) or (B, N), has_tokens (B,) bool."""
    eos_then_pad = tf.where(tf.range(tf.shape(ids)[-1]) == 0, EOS_ID, PAD_ID)  # (L,)
    rows = lambda x: tf.reshape(has_tokens, [-1] + [1] * (x.shape.rank - 1))  # noqa: E731
    ids = tf.where(rows(ids), ids, tf.cast(eos_then_pad, ids.dtype))
    return ids, tf.where(rows(scores), scores, tf.zeros_like(scores))
