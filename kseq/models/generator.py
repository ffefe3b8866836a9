"""Batched generation shared by the Seq2Seq models and the language model."""

import collections
import random

import tensorflow as tf

from kseq.decoding.factory import make_search
from kseq.decoding.output import best_hypotheses, trim_padding
from kseq.decoding.protocol import Decoder
from kseq._validation import check_positive_int


class Generator(Decoder):
    """Mixin for kseq models that implement the decoder protocol
    (`kseq.decoding.Decoder`): adds `generate`, with one traced function per
    set of search options. The model provides `_check_prompt(ids)`,
    `output_vocab_size` and `length_limit` (the longest sequence it accepts,
    None for no limit).
    """

    output_vocab_name = "the vocabulary size"  # how errors name `output_vocab_size`

    def generate(self, source_ids, max_length: int = 64, method: str = "greedy", beam_size: int = 4,
                 length_penalty: float = 0.6, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, num_return: int = 1,
                 no_repeat_ngram_size: int = 0, max_ngram_count: int = 1, max_length_ratio: float | None = None,
                 return_scores: bool = False, jit_compile: bool = False, search=None,
                 patience: float | None = None):
        """Decodes a batch: translates sources (Seq2Seq models) or continues
        prompts (language models).

        Args:
            source_ids: (B, S) int ids, right-padded with PAD (0): the sources
                (an all-PAD source gives EOS at once), or the prompts (an
                all-PAD row starts a new document).
            max_length: the most tokens to generate.
            method: "greedy", "beam" or "sample" (kseq.decoding's
                GreedySearch, BeamSearch and Sampler).
            beam_size, length_penalty, num_return: beam search options; with
                `num_return` N > 1 the N best hypotheses come back, best first.
            temperature, top_k, top_p, seed: sampling options; the same seed
                gives the same output (None: a fresh draw every call).
            no_repeat_ngram_size: n > 0 never generates the same n-gram twice
                in one output, with every method (0: no constraint).
            max_ngram_count: with `no_repeat_ngram_size` n > 0, how many
                times an n-gram may occur in one output (default 1: never
                twice; 2 lets a phrase come back once, never a third time).
            max_length_ratio: Seq2Seq models only: each row generates at
                most ceil(ratio x its source tokens) + `length_slack` tokens
                (`kseq.decoding.Limits`; None: no limit below `max_length`).
            return_scores: also return the scores: length-penalised
                log-probabilities for beam search, summed token
                log-probabilities otherwise.
            jit_compile: compile the search with XLA (one compilation per
                batch shape; worth it for repeated calls of one shape).
            search: a kseq.decoding search object (e.g. `BeamSearch(limits=
                Limits(32, max_length_ratio=1.5), beam_size=4)`) to decode
                with instead of `max_length`, `method` and the method's options.
            patience: beam search: a row stops once it holds ceil(patience x
                beam_size) finished hypotheses (1.0: the rule of fairseq and
                CTranslate2, far fewer steps); None: only once no alive
                hypothesis can win (`BeamSearch`).

        Returns:
            (B, T') int32 ids, T' <= max_length (or (B, N, T') for
            `num_return` > 1): no BOS, EOS kept, PAD (0) after EOS; with
            `return_scores`, a pair (ids, scores (B,) or (B, N)).
        """
        if search is not None:
            return self._generate_with(search, source_ids, return_scores, jit_compile)
        options = self._search_options(
            seed, method=method, max_length=max_length, beam_size=beam_size,
            length_penalty=length_penalty, num_return=num_return,
            temperature=temperature, top_k=top_k, top_p=top_p,
            no_repeat_ngram_size=no_repeat_ngram_size, max_ngram_count=max_ngram_count,
            max_length_ratio=max_length_ratio, patience=patience,
        )
        ids, scores = self._search_with_options(source_ids, options, seed, jit_compile)
        return _finished(ids, scores, method == "beam" and num_return == 1, return_scores)

    def _search_options(self, seed, **options):
        """`generate`'s search options, every one checked now, by name.

        Args:
            seed: the sampling seed (None: drawn later).
            **options: the options `make_search` takes besides `seed`.

        Returns:
            The options, `max_length` as a Python int.

        Raises:
            ValueError: an option is bad, or `max_length` or `top_k` is over
                what the model allows.
        """
        max_length = options["max_length"] = check_positive_int("max_length", options["max_length"])
        if self.length_limit is not None and max_length > self.length_limit:
            raise ValueError(
                f"`max_length`={max_length} is over the model's max_length "
                f"{self.length_limit}."
            )
        top_k = options["top_k"]
        if top_k is not None and check_positive_int("top_k", top_k) > self.output_vocab_size:
            raise ValueError(
                f"`top_k` ({top_k}) must be <= {self.output_vocab_name} ({self.output_vocab_size})."
            )
        make_search(seed=seed, **options)
        return options

    def _search_with_options(self, source_ids, options, seed, jit_compile):
        """Runs the search that checked `options` describe, in the traced
        function kept for them.

        Args:
            source_ids: (B, S) the sources or prompts, as `generate` takes them.
            options: the options from `_search_options`.
            seed: the sampling seed; None draws one.
            jit_compile: compile the search with XLA.

        Returns:
            The search's fixed-shape (ids, scores).
        """
        if seed is None:
            seed = random.SystemRandom().randrange(2**31 - 1)
        source_ids = self._check_prompt(source_ids)
        self._ensure_built()  # variables must exist before tracing
        function = self._generate_function(tuple(sorted(options.items())), bool(jit_compile),
                                           lambda seed: make_search(seed=seed, **options))
        return function(source_ids, tf.constant(seed, tf.int32))

    def _generate_with(self, search, source_ids, return_scores, jit_compile):
        """`generate` with a search object."""
        if self.length_limit is not None and search.max_length > self.length_limit:
            raise ValueError(f"`max_length` (the search's, {search.max_length}) is over the model's "
                             f"max_length {self.length_limit}.")
        source_ids = self._check_prompt(source_ids)
        self._ensure_built()
        function = self._generate_function(search, bool(jit_compile), lambda seed: search)
        ids, scores = function(source_ids, tf.constant(0, tf.int32))
        return _finished(ids, scores, getattr(search, "num_return", None) == 1, return_scores)

    def attention_by_steps(self, input_ids, target_ids):
        """`Decoder.attention_by_steps`; called eagerly by a model with
        attention, one traced `tf.while_loop` over the steps, kept for any
        batch and length.

        Run eagerly, every op of every step dispatches on its own, and a
        task draws its attention maps at every evaluation: traced once, the
        loop costs one graph run a call (figures in benchmarks/RESULTS.md,
        "Training speed"). The values are the eager loop's. Inside a trace,
        and for a model without attention, `Decoder`'s loop.
        """
        if not (tf.executing_eagerly() and getattr(self, "has_attention", False)) or target_ids.shape[1] == 0:
            return super().attention_by_steps(input_ids, target_ids)
        input_ids, target_ids = tf.convert_to_tensor(input_ids), tf.convert_to_tensor(target_ids)
        key = ("attention_by_steps", input_ids.dtype, input_ids.shape.rank, target_ids.dtype)
        if "_generate_cache" not in self.__dict__:
            self._generate_cache = _FunctionCache()
        function = self._generate_cache.get(key)
        if function is None:
            signature = [tf.TensorSpec([None] * input_ids.shape.rank, input_ids.dtype),
                         tf.TensorSpec((None, None), target_ids.dtype)]
            function = tf.function(self._attention_loop, input_signature=signature, autograph=False)
            self._generate_cache.put(key, function)
        return function(input_ids, target_ids)

    def _attention_loop(self, input_ids, target_ids):
        """`attention_by_steps` as one `tf.while_loop`, the state growing a step at a time."""
        steps = tf.shape(target_ids)[1]
        state, _ = self.begin_decoding(input_ids, max_length=None)
        dtypes = []  # the step's attention dtype, known once the body is traced

        def body(index, state, weights):
            _, state, attention = self.step_with_attention(target_ids[:, index], state, index)
            dtypes.append(attention.dtype)
            return index + 1, state, weights.write(index, tf.cast(attention, tf.float32))

        weights = tf.TensorArray(tf.float32, size=steps)
        _, _, weights = tf.while_loop(lambda index, *_: index < steps, body, (tf.constant(0), state, weights))
        return tf.cast(tf.transpose(weights.stack(), [1, 0, 2]), dtypes[0])

    def _generate_function(self, key, jit_compile, search_for):
        """One traced function per `key` (a set of search options, or a
        search object): later calls with the same key (any batch, any seed)
        do not retrace. `search_for(seed)` makes the search in the trace."""
        if "_generate_cache" not in self.__dict__:
            self._generate_cache = _FunctionCache()
        function = self._generate_cache.get((key, jit_compile))
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
                return self.search(source_ids, search_for(seed), fixed_shapes=jit_compile)

            self._generate_cache.put((key, jit_compile), function)
        return function


def _finished(ids, scores, first_beam, return_scores):
    """A search's output as `generate` returns it: the first beam alone
    where one hypothesis was asked of a beam search, the PAD columns cut."""
    if first_beam:
        ids, scores = best_hypotheses(ids), scores[:, 0]
    ids = trim_padding(ids)
    return (ids, scores) if return_scores else ids


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
