"""A Marian checkpoint's config.json, checked and read as `TransformerSeq2Seq`'s arguments.

kseq loads the architecture OPUS-MT's translators have: post-norm blocks,
fixed sinusoidal positions in Marian's layout, no LayerNorm on the
embeddings, one activation kseq has, the output projection tied to the
decoder's embedding, decoding started from the pad id. A config of another
architecture gets one error naming the field and its value.
"""

import dataclasses

from kseq.errors import UsageError

# config.json's activation -> kseq's: transformers' "swish" and "silu" are one
# function, its "gelu" is the exact (erf) one, as keras' "gelu".
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}

# Fields of BART-derived configs (older OPUS-MT conversions carry them) whose
# other values mean another architecture: (field, the value Marian has, why).
OTHER_ARCHITECTURE = (
    ("normalize_before", False, "pre-norm blocks"),
    ("normalize_embedding", False, "a LayerNorm on the embeddings (layernorm_embedding)"),
    ("layernorm_embedding", False, "a LayerNorm on the embeddings"),
    ("static_position_embeddings", True, "learned position embeddings"),
    ("add_final_layer_norm", False, "a final LayerNorm after each stack"),
    ("tie_word_embeddings", True, "an output projection of its own, not the decoder's embedding"),
    ("is_decoder", False, "a decoder-only model"),
)

SIZES = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
         "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size")
IDS = ("pad_token_id", "eos_token_id")


@dataclasses.dataclass(frozen=True)
class MarianConfig:
    """What kseq reads of a Marian config.json.

    Args:
        model_arguments: `TransformerSeq2Seq`'s keyword arguments, vocabulary sizes excluded.
        source_size, target_size: the Marian vocabularies' sizes (the embeddings' rows).
        shared: one embedding for encoder, decoder and output.
        pad_id, eos_id: Marian's PAD (the decoder's start too) and EOS.
        ignored: what the config sets that kseq does not apply, one line each.
    """

    model_arguments: dict
    source_size: int
    target_size: int
    shared: bool
    pad_id: int
    eos_id: int
    ignored: tuple = ()


def read_marian_config(config, path="config.json"):
    """Checks a Marian config.json and reads it.

    Args:
        config: the parsed config.json.
        path: the file, for messages. Default "config.json".

    Returns:
        A `MarianConfig`.

    Raises:
        UsageError: a field missing, or a value of another architecture (named with its value).
    """
    def refuse(field, why):
        raise UsageError(f"{path}: {field} is {config.get(field)!r}: {why}; kseq loads Marian Transformers "
                         "(OPUS-MT's: post-norm, sinusoidal positions, tied output)")

    if not isinstance(config, dict):
        raise UsageError(f"{path} is not a JSON object.")
    if config.get("model_type") != "marian":
        refuse("model_type", "not a Marian checkpoint (model_type \"marian\")")
    for field, least in [(name, 1) for name in SIZES] + [(name, 0) for name in IDS]:
        if not _is_int(config.get(field), least):
            refuse(field, f"an integer >= {least} is expected")
    for field, marian, why in OTHER_ARCHITECTURE:
        if field in config and config[field] != marian:
            refuse(field, f"that is {why}")
    activation = ACTIVATIONS.get(config.get("activation_function", "gelu"))
    if activation is None:
        refuse("activation_function", f"kseq's Transformer has {sorted(ACTIVATIONS)}")
    pad, start = config["pad_token_id"], config.get("decoder_start_token_id", config["pad_token_id"])
    if start != pad:
        refuse("decoder_start_token_id", f"Marian's decoder starts from the pad id ({pad})")
    shared = config.get("share_encoder_decoder_embeddings", True)
    source_size = config["vocab_size"]
    target_size = config.get("decoder_vocab_size") or source_size
    if shared and target_size != source_size:
        refuse("decoder_vocab_size", f"shared embeddings need vocab_size ({source_size}) for both sides")
    for field, size in (("vocab_size", source_size), ("decoder_vocab_size", target_size)):
        if not 0 <= pad < size or not 0 <= config["eos_token_id"] < size:
            refuse(field, f"pad_token_id {pad} and eos_token_id {config['eos_token_id']} must be ids of it")
    if config["d_model"] % 2:
        refuse("d_model", "Marian's sinusoidal positions need an even width")
    arguments = dict(
        num_layers=config["encoder_layers"], d_model=config["d_model"], num_heads=config["encoder_attention_heads"],
        ff_dim=config["encoder_ffn_dim"], decoder_num_layers=config["decoder_layers"],
        decoder_num_heads=config["decoder_attention_heads"], decoder_ff_dim=config["decoder_ffn_dim"],
        dropout=float(config.get("dropout", 0.1)), norm_first=False,
        max_length=int(config.get("max_position_embeddings", 512)), position="sinusoidal_halves",
        share_embeddings=bool(shared), tie_output_embedding=not shared, activation=activation,
        layer_norm_epsilon=1e-5, scale_embeddings=bool(config.get("scale_embedding", False)))
    return MarianConfig(arguments, source_size, target_size, bool(shared), pad, config["eos_token_id"],
                        _ignored(config))


def _ignored(config):
    """Training-time settings kseq's Transformer has no place for."""
    lines = []
    for field in ("attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop"):
        if config.get(field):
            lines.append(f"{field} {config[field]} is not applied (kseq drops out embeddings and sublayer outputs)")
    return tuple(lines)


def _is_int(value, least):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least
