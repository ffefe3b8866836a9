"""What RNNSeq2Seq and TransformerSeq2Seq share: inputs, decoding, plots."""

import collections
import random

import keras
import tensorflow as tf

from kseq.decoding.beam_search import gather_beams
from kseq.decoding.factory import make_search, trim_padding
from kseq.layers.masking import padding_mask
from kseq.special_ids import NUM_SPECIAL_IDS
from kseq.validation import as_id_array, check_positive_int, check_token_ids


class Seq2Seq(keras.Model):
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
        self._generate_cache = _FunctionCache()

    # Longest sequence the model accepts (None: no limit).
    length_limit = None

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

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # keras 3.15 builds metrics from the first batch of `fit`, averaging
        # the replicas' shards, which fails when they differ in size (an odd
        # bucketed batch). The first replica's shard has the same structure.
        strategy = self._distribute_strategy
        if strategy is not None and iterator is not None:
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda value: strategy.experimental_local_results(value)[0]
                    if isinstance(value, tf.distribute.DistributedValues) else value,
                    next(batches),
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

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

    def generate(
        self,
        source_ids,
        max_length=64,
        method="greedy",
        beam_size=4,
        length_penalty=0.6,
        temperature=1.0,
        top_k=None,
        top_p=None,
        seed=None,
        num_return=1,
        return_scores=False,
        jit_compile=False,
    ):
        """Translates a batch of sources.

        Args:
            source_ids: (B, S) int ids, right-padded with PAD (0).
            max_length: the most tokens to generate.
            method: "greedy", "beam" or "sample" (kseq.decoding's
                GreedySearch, BeamSearch and Sampler).
            beam_size, length_penalty, num_return: beam search options; with
                `num_return` N > 1 the N best hypotheses come back, best first.
            temperature, top_k, top_p, seed: sampling options; the same seed
                gives the same output (None: a fresh draw every call).
            return_scores: also return the scores: length-penalised
                log-probabilities for beam search, summed token
                log-probabilities otherwise.
            jit_compile: compile the search with XLA (one compilation per
                batch shape; worth it for repeated calls of one shape).

        Returns:
            (B, T') int32 ids, T' <= max_length (or (B, N, T') for
            `num_return` > 1): no BOS, EOS kept, PAD (0) after EOS; with
            `return_scores`, a pair (ids, scores (B,) or (B, N)).
        """
        max_length = check_positive_int("max_length", max_length)
        if self.length_limit is not None and max_length > self.length_limit:
            raise ValueError(
                f"`max_length`={max_length} is over the model's max_length "
                f"{self.length_limit}."
            )
        if top_k is not None and check_positive_int("top_k", top_k) > self.target_vocab_size:
            raise ValueError(
                f"`top_k` ({top_k}) must be <= target_vocab_size ({self.target_vocab_size})."
            )
        options = dict(
            method=method, max_length=max_length, beam_size=beam_size,
            length_penalty=length_penalty, num_return=num_return,
            temperature=temperature, top_k=top_k, top_p=top_p,
        )
        make_search(seed=seed, **options)  # checks every option now, by name
        if seed is None:
            seed = random.SystemRandom().randrange(2**31 - 1)
        source_ids = self._check_source(source_ids)
        self._ensure_built()  # variables must exist before tracing
        function = self._generate_function(options, bool(jit_compile))
        ids, scores = function(source_ids, tf.constant(seed, tf.int32))
        if method == "beam" and num_return == 1:
            ids, scores = ids[:, 0], scores[:, 0]
        ids = trim_padding(ids)
        return (ids, scores) if return_scores else ids

    def _ensure_built(self):
        """Builds the model for entry points that do not go through __call__."""
        if not self.built:
            self.build()

    def _generate_function(self, options, jit_compile):
        """One traced function per set of search options: later calls with the
        same options (any batch, any seed) do not retrace."""
        key = (tuple(sorted(options.items())), jit_compile)
        function = self._generate_cache.get(key)
        if function is None:

            @tf.function(
                input_signature=[
                    tf.TensorSpec((None, None), tf.int32),
                    tf.TensorSpec((), tf.int32),
                ],
                autograph=False,
                jit_compile=jit_compile,
            )
            def function(source_ids, seed):
                return self.search(source_ids, make_search(seed=seed, **options))

            self._generate_cache.put(key, function)
        return function

    def search(self, source_ids, search):
        """Runs a kseq.decoding search on a batch of sources, in TensorFlow ops
        (callable inside any tf.function); returns its fixed-shape output."""
        mask = padding_mask(source_ids)
        encoded = self.encode(source_ids, training=False)
        state = self.initial_state(encoded, mask, max_length=search.max_length)
        return search(
            self.step, state, tf.shape(source_ids)[0], reorder_state=self.reorder_state
        )

    def reorder_state(self, state, indices):
        """Beam search's state reordering: row i becomes row indices[i].
        Subclasses skip the parts that are equal across a row's beams."""
        return gather_beams(state, indices)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
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


class _FunctionCache:
    """The most recently used traced functions, kept off the model's
    checkpoint and SavedModel graph (a plain object: TensorFlow's tracking
    does not look inside it)."""

    def __init__(self, size=8):
        self.size, self.functions = size, collections.OrderedDict()

    def get(self, key):
        if key in self.functions:
            self.functions.move_to_end(key)
        return self.functions.get(key)

    def put(self, key, function):
        self.functions[key] = function
        while len(self.functions) > self.size:
            self.functions.popitem(last=False)


def _check_vocab_size(name, value):
    value = check_positive_int(name, value)
    if value <= NUM_SPECIAL_IDS:
        raise ValueError(
            f"`{name}` must be > {NUM_SPECIAL_IDS}: ids 0-3 are PAD, BOS, EOS "
            f"and UNK; got {value}."
        )
    return value
