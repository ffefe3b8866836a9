"""The language model's servable: prompt strings in, continuations out."""

import tensorflow as tf

from kseq.decoding.output import decoded_text
from kseq.export.publishing import write_servable
from kseq.export.requests import blank_out, id_matrix, length_within, normalized

PROMPT_SPEC = tf.TensorSpec([None], tf.string, name="prompt")


def continue_function(model, tokenizer, search, max_prompt_length=256):
    """prompts (B,) -> {"continuation": strings (B,), "token_ids": (B, T')}:
    a language model's `search` from the last `max_prompt_length` tokens of
    each prompt, read as training read text; a blank prompt gets "", in
    TensorFlow ops."""
    max_prompt_length = length_within(model.length_limit, max_prompt_length, "max_prompt_length")

    def continue_text(prompt):
        prompt, blank = normalized(prompt)
        ids = tokenizer.tokenize(prompt)
        generated, _ = model.search(id_matrix(ids[:, -max_prompt_length:]), search)
        text, ids = decoded_text(tokenizer, generated)
        return blank_out(blank, {"continuation": text, "token_ids": ids})

    return continue_text


def export_language_model(
    model, tokenizer, export_dir: str, search, version: int | None = None, max_prompt_length: int = 256,
    assets: dict[str, bytes] | None = None
) -> str:
    """Writes `export_dir/<version>/` with `serving_default`:
    {"prompt": tf.string (None,)} -> {"continuation": tf.string (None,),
    "token_ids": int32 (None, None)} (see `continue_function`); a seeded
    `kseq.decoding.Sampler` gives the same continuation for the same prompt.

    Returns:
        The path of the new version.
    """
    model._ensure_built()
    function = continue_function(model, tokenizer, search, max_prompt_length)
    return write_servable(
        export_dir, {"serving_default": (function, [PROMPT_SPEC])}, (model, tokenizer),
        version, assets, warmup={"serving_default": {"prompt": ["warm-up"]}},
    )
