"""The translator's servable: source strings in, translations out, the search in the graph."""

import tensorflow as tf

from kseq.decoding import GreedySearch
from kseq.decoding.output import decoded_text
from kseq.export.publishing import write_servable
from kseq.export.requests import few_shapes, id_matrix, length_within, normalized

SOURCE_SPEC = tf.TensorSpec([None], tf.string, name="source")


def translate_function(model, source_tokenizer, target_tokenizer, max_length=64,
                       max_source_length=256, search=None, jit_compile=False):
    """strings (B,) -> {"translation": strings (B,), "token_ids": (B, T')}.

    Tokenizer, search and detokenizer, all in TensorFlow ops: the function
    the exported signature serves, usable in-process too. `search` is a
    kseq.decoding search (default: greedy up to `max_length` tokens); beam
    search serves its best hypothesis. Sources are cut to their first
    `max_source_length` tokens, and never more than the model's own
    `max_length` (a Transformer's position table): an over-long request gets
    the translation of its beginning, not an error.

    With `jit_compile`, the search (not the tokenizers, which XLA cannot
    compile) is compiled with XLA, once per input shape: requests are padded
    to a power-of-two number of rows and a multiple of 16 source tokens, so
    few shapes ever compile (decoding on a GPU is many times faster so).

    Raises:
        ValueError: the search would generate more tokens than the model's
            `max_length` allows.
    """
    search = search or GreedySearch(max_length)
    max_source_length = length_within(model.length_limit, max_source_length, "max_source_length")
    if model.length_limit is not None and search.max_length > model.length_limit:
        raise ValueError(
            f"`max_length` (the search's, {search.max_length}) is over the model's "
            f"max_length {model.length_limit}."
        )
    run_search = _search_function(model, search, jit_compile)

    def translate(source):
        source, _ = normalized(source)  # a blank source has no ids: it translates to ""
        ids = id_matrix(source_tokenizer.tokenize(source)[:, :max_source_length])
        rows = tf.shape(ids)[0]
        if jit_compile:
            ids = few_shapes(ids, max_source_length)
        generated, _ = run_search(ids)
        text, ids = decoded_text(target_tokenizer, generated[:rows])
        return {"translation": text, "token_ids": ids}

    return translate


def _search_function(model, search, jit_compile):
    """ids (B, S) -> the search's (ids, scores), compiled with XLA if asked."""
    if not jit_compile:
        return lambda ids: model.search(ids, search)
    return tf.function(
        lambda ids: model.search(ids, search),
        input_signature=[tf.TensorSpec([None, None], tf.int32)], jit_compile=True, autograph=False,
    )


def export_translator(
    model, source_tokenizer, target_tokenizer, export_dir, version=None, max_length=64,
    max_source_length=256, search=None, assets=None, jit_compile=False,
):
    """Writes `export_dir/<version>/`, a SavedModel with `serving_default`:
    {"source": tf.string (None,)} -> {"translation": tf.string (None,),
    "token_ids": int32 (None, None)}, decoding with `search` (see
    `translate_function`; `jit_compile` serves the search compiled by XLA,
    which TF Serving does on a GPU or CPU build with XLA). `assets` ({file
    name: bytes}, e.g. the vocabulary) are written to the version's
    `assets/` folder. Written atomically (see `write_servable`).

    Returns:
        The path of the new version.
    """
    model._ensure_built()
    function = translate_function(
        model, source_tokenizer, target_tokenizer, max_length, max_source_length, search,
        jit_compile,
    )
    return write_servable(
        export_dir, {"serving_default": (function, [SOURCE_SPEC])},
        (model, source_tokenizer, target_tokenizer), version, assets,
    )
