"""What RNNSeq2Seq and TransformerSeq2Seq share: inputs, decoding, plots."""

import keras
import tensorflow as tf

from kseq.layers.masking import padding_mask
from kseq.layers.recurrent import portable_recurrence
from kseq.models.checked_weights import CheckedWeightLoading
from kseq.models.first_shard_build import FirstShardBuild
from kseq.models.generator import Generator
from kseq.special_ids import EOS_ID, NUM_SPECIAL_IDS, PAD_ID
from kseq.validation import as_id_array, check_positive_int, check_token_ids


class Seq2Seq(CheckedWeightLoading, FirstShardBuild, Generator, keras.Model):
    """Base of the encoder-decoder models.

    Subclasses implement the decoder protocol:
    - `encode(source_ids, training=False)` -> encoder outputs (a dict);
    - `initial_state(encoder_outputs, source_padding_mask, max_length=None)`
      -> decoder state (a nest of batch-major tensors, source included);
    - `step(token_ids, state, index)` -> (logits (B, V), state);
    and `_cross_attention(source_ids, target_ids)` for plotting.
    """

    def __init__(self, source_vocab_size, target_vocab_size, **kwargs):
        super().__init__(**kwargs)
        self.source_vocab_size = _check_vocab_size("source_vocab_size", source_vocab_size)
        self.target_vocab_size = _check_vocab_size("target_vocab_size", target_vocab_size)

    @property
    def _default_save_signature(self):
        # Keras would trace `call` with float32 inputs for a default SavedModel
        # signature (and TensorFlow evaluates this property whenever it walks
        # the model); ids are ints, and kseq.export writes the real signature.
        return None

    def __call__(self, inputs, *args, **kwargs):
        # Keras would reject nested Python lists before `call` could explain.
        if isinstance(inputs, dict):
            inputs = {name: as_id_array(value, name) for name, value in inputs.items()}
        return super().__call__(inputs, *args, **kwargs)

    output_vocab_name = "target_vocab_size"

    @property
    def output_vocab_size(self):
        return self.target_vocab_size

    def _check_prompt(self, source_ids):
        return self._check_source(source_ids)

    def search(self, source_ids, search):
        """Runs a kseq.decoding search on a batch of sources, in TensorFlow ops
        (callable inside any tf.function); returns its fixed-shape output.
        A source with no tokens (all PAD, e.g. an empty string) translates to
        nothing: EOS at once, score 0. Recurrent layers run keras' portable
        loop (no cuDNN op), so the search compiles with XLA and exports."""
        mask = padding_mask(source_ids)
        with portable_recurrence(self):
            encoded = self.encode(source_ids, training=False)
            state = self.initial_state(encoded, mask, max_length=search.max_length)
            ids, scores = search(
                self.step, state, tf.shape(source_ids)[0], reorder_state=self.reorder_state
            )
        return _end_empty_sources(ids, scores, tf.reduce_any(mask, axis=1))

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
        source_ids = self._check_source(inputs["source_ids"])
        target_ids = check_token_ids(
            inputs["target_ids"], "target_ids", self.target_vocab_size, self.length_limit
        )
        source_batch, target_batch = source_ids.shape[0], target_ids.shape[0]
        if None not in (source_batch, target_batch) and source_batch != target_batch:
            raise ValueError(
                f"`source_ids` and `target_ids` must have the same batch size; "
                f"got {source_batch} and {target_batch}."
            )
        return source_ids, target_ids

    def get_config(self):
        return {
            **super().get_config(),  # name, trainable, dtype (its policy)
            "source_vocab_size": self.source_vocab_size,
            "target_vocab_size": self.target_vocab_size,
        }

    def attention_weights(self, inputs):
        """Decoder-to-source attention (B, T, S) of a teacher-forced pass.

        Rows sum to 1 over the source and are 0 on source padding. For the
        Transformer: the last decoder layer, averaged over heads.
        """
        source_ids, target_ids = self._split_inputs(inputs)
        self._ensure_built()
        return self._cross_attention(source_ids, target_ids)


def _check_vocab_size(name, value):
    value = check_positive_int(name, value)
    if value <= NUM_SPECIAL_IDS:
        raise ValueError(
            f"`{name}` must be > {NUM_SPECIAL_IDS}: ids 0-3 are PAD, BOS, EOS "
            f"and UNK; got {value}."
        )
    return value


def _end_empty_sources(ids, scores, has_tokens):
    """Rows without source tokens -> EOS then PAD, score 0. ids (B, L) or
    (B, N, L), scores (B,) or (B, N), has_tokens (B,) bool."""
    eos_then_pad = tf.where(tf.range(tf.shape(ids)[-1]) == 0, EOS_ID, PAD_ID)  # (L,)
    rows = lambda x: tf.reshape(has_tokens, [-1] + [1] * (x.shape.rank - 1))  # noqa: E731
    ids = tf.where(rows(ids), ids, tf.cast(eos_then_pad, ids.dtype))
    return ids, tf.where(rows(scores), scores, tf.zeros_like(scores))
