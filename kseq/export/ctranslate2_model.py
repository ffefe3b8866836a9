"""A kseq Transformer as a CTranslate2 model: the same network, served by
CTranslate2's C++ runtime instead of TensorFlow.

CTranslate2 (the `ctranslate2` extra) is the engine OpenNMT, LibreTranslate
and Argos Translate deploy: a C++ runtime whose beam search runs faster than
kseq's SavedModel on the default translator (figures in benchmarks/RESULTS.md,
Serving), and which can quantize to int8 when it loads. Its Transformer covers
kseq's exactly: post- or pre-norm blocks, ReLU, GELU or SiLU feed-forward layers, each
stack its own depth and heads, embeddings scaled by sqrt(D) (or not) plus a position
table (kseq's sinusoidal rows, in either layout, or learned rows are written out as
the table), tied or separate output projection; so a fine-tuned Marian model converts too. Recurrent
models have no CTranslate2 form.

The model reads tokens, not text: give it the pieces of the SentencePiece
model written beside it (`spm.model`), see README's Serving section.
"""

import importlib.util
import os

import numpy as np

from kseq.export.publishing import publish
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

QUANTIZATIONS = (None, "int8", "int8_float32", "int16", "float16", "bfloat16")
# Names for kseq's reserved ids where a vocabulary has no token of its own.
RESERVED_TOKENS = ("<blank>", "<s>", "</s>", "<unk>")


def export_ctranslate2(model, source_tokenizer, target_tokenizer, export_dir, quantization=None,
                       version=None, assets=None):
    """Writes `export_dir/<version>/`, a CTranslate2 model of the Transformer `model` with its vocabularies.

    Written beside the target and renamed when complete (see `publish`).

    Args:
        model: a built `kseq.models.TransformerSeq2Seq`.
        source_tokenizer: the tokenizer its sources were read with
            (`SubwordTokenizer`, `KerasHubTokenizer` or a pretrained
            translator's `MarianTokenizer`): its tokens become
            the model's source vocabulary, kseq's ids 0-3 its blank, start,
            end and unknown tokens.
        target_tokenizer: the same for its targets.
        export_dir: the folder of the versions.
        quantization: None keeps float32 weights (CTranslate2 can still
            quantize them when it loads: `compute_type="int8"`); one of
            "int8", "int8_float32", "int16", "float16", "bfloat16" stores
            them so. Default None.
        version: an int >= 0 whose folder is absent or empty. Default None: the next free version.
        assets: {file name: bytes} written into the version, e.g. the
            tokenizer's `spm.model`. Default None.

    Returns:
        The path of the new version.

    Raises:
        ValueError: a model CTranslate2 cannot run (named), a tokenizer
            without a token list, or an unknown `quantization`.
        ImportError: ctranslate2 is not installed.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {QUANTIZATIONS}; got {quantization!r}.")
    spec = transformer_spec(model, vocabulary(source_tokenizer), vocabulary(target_tokenizer))
    converter = _converter(spec)

    def write(folder):
        converter.convert(folder, quantization=quantization, force=True)
        for name, content in (assets or {}).items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(content)

    return publish(export_dir, version, write)


def transformer_spec(model, source_tokens, target_tokens):
    """Builds the `ctranslate2.specs.TransformerSpec` of `model`, weights and vocabularies filled in (float32).

    PAD and BOS get an output bias of -1e4, so that CTranslate2, like kseq's
    searches, never gives them any probability.

    Args:
        model: a built `kseq.models.TransformerSeq2Seq`.
        source_tokens: the source vocabulary's tokens in id order (`vocabulary`).
        target_tokens: the target vocabulary's tokens in id order.

    Returns:
        The TransformerSpec.

    Raises:
        ValueError: `model` is no built TransformerSeq2Seq, its feed-forward
            activation is not ReLU, GELU or SiLU, or a token list's length is
            not the model's vocabulary size.
        ImportError: ctranslate2 is not installed.
    """
    specs = _ctranslate2().specs
    _check_model(model)
    first = model.encoder_blocks[0]
    activation = _activation(first, specs)
    # Each stack its own depth and heads: a distilled Marian student's decoder is smaller.
    spec = specs.TransformerSpec(
        specs.TransformerEncoderSpec(len(model.encoder_blocks), first.num_heads, pre_norm=model.norm_first,
                                     activation=activation),
        specs.TransformerDecoderSpec(len(model.decoder_blocks), model.decoder_blocks[0].num_heads,
                                     pre_norm=model.norm_first, activation=activation))
    spec.config.layer_norm_epsilon = first.layer_norm_epsilon
    for side, size, tokens in (("source", model.source_vocab_size, source_tokens),
                               ("target", model.target_vocab_size, target_tokens)):
        if len(tokens) != size:
            raise ValueError(f"The {side} tokenizer has {len(tokens)} tokens; the model's {side} "
                             f"vocabulary has {size}: pass the tokenizer the model was trained with.")
    spec.config.bos_token, spec.config.eos_token = target_tokens[BOS_ID], target_tokens[EOS_ID]
    spec.config.unk_token = target_tokens[UNK_ID]
    spec.config.decoder_start_token = target_tokens[BOS_ID]
    spec.register_source_vocabulary(list(source_tokens))
    spec.register_target_vocabulary(list(target_tokens))

    _set_embedding(spec.encoder, spec.encoder.embeddings[0], model.source_embedding, model)
    _set_embedding(spec.decoder, spec.decoder.embeddings, model.target_embedding, model)
    for layer, block in zip(spec.encoder.layer, model.encoder_blocks):
        _set_attention(layer.self_attention, block.self_attention, block.self_attention_norm, fused=True)
        _set_feed_forward(layer.ffn, block)
    for layer, block in zip(spec.decoder.layer, model.decoder_blocks):
        _set_attention(layer.self_attention, block.self_attention, block.self_attention_norm, fused=True)
        _set_attention(layer.attention, block.cross_attention, block.cross_attention_norm, fused=False)
        _set_feed_forward(layer.ffn, block)
    if model.norm_first:
        _set_norm(spec.encoder.layer_norm, model.encoder_norm)
        _set_norm(spec.decoder.layer_norm, model.decoder_norm)
    if model.output_projection is None:  # tied to the target embedding
        kernel, bias = _array(model.target_embedding.embeddings).T, _array(model.output_bias)
    else:
        kernel, bias = _dense(model.output_projection)
    _set_linear(spec.decoder.projection, kernel, _suppressing_special_tokens(bias, kernel.shape[1]))
    return spec


def _suppressing_special_tokens(bias, vocab_size):
    """kseq's searches and scores never give PAD or BOS any probability
    (`suppress_special_tokens`); a bias of -1e4 makes CTranslate2's softmax
    the same (still finite in float16)."""
    bias = np.zeros(vocab_size, np.float32) if bias is None else bias.copy()
    bias[[PAD_ID, BOS_ID]] = -1e4
    return bias


def vocabulary(tokenizer):
    """Lists the tokenizer's tokens in id order, kseq's ids 0-3 included.

    Args:
        tokenizer: a `SubwordTokenizer` or `KerasHubTokenizer`; reserved ids
            without a token of their own get "<blank>", "<s>", "</s>", "<unk>" (renamed if taken),
            and ids the vocabulary leaves unnamed "<unusedN>".

    Returns:
        A list of token strings, one per id.

    Raises:
        ValueError: the tokenizer has no token list.
    """
    if hasattr(tokenizer, "tokens"):  # a MarianTokenizer: its pieces in kseq's order, BOS named
        return tokenizer.tokens()
    proto = getattr(tokenizer, "proto", None)
    if proto is not None:  # a SubwordTokenizer: SentencePiece's pieces are kseq's ids
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    hub_layer = getattr(tokenizer, "tokenizer", None)
    if hub_layer is None or not hasattr(hub_layer, "get_vocabulary"):
        raise ValueError(
            f"A CTranslate2 model needs the tokenizer's tokens; {type(tokenizer).__name__} has no token "
            "list. Use a SubwordTokenizer or a KerasHubTokenizer."
        )
    tokens = list(hub_layer.get_vocabulary())
    if tokenizer.id_offset:
        tokens = [_free_name(name, tokens) for name in RESERVED_TOKENS] + tokens
    if len(tokens) < tokenizer.vocab_size:  # ids the vocabulary leaves unnamed
        tokens += [f"<unused{i}>" for i in range(len(tokens), tokenizer.vocab_size)]
    return tokens


def _free_name(name, tokens):
    while name in tokens:
        name = f"<kseq{name}"
    return name


def _check_model(model):
    from kseq.models.transformer_seq2seq import TransformerSeq2Seq

    if not isinstance(model, TransformerSeq2Seq):
        raise ValueError(
            f"CTranslate2 runs Transformers; {type(model).__name__} has no CTranslate2 form. Serve it "
            "through its SavedModel (export_translator) instead."
        )
    if not model.built:
        raise ValueError("Build or train the model before exporting it: it has no weights yet.")


def _activation(block, specs):
    import keras

    names = {keras.activations.relu: "RELU", keras.activations.gelu: "GELU", keras.activations.silu: "SWISH"}
    name = names.get(block.activation)
    if name is None:
        raise ValueError(f"CTranslate2 export supports ReLU, GELU and SiLU (swish) feed-forward layers; the model uses "
                         f"{keras.activations.serialize(block.activation)!r}.")
    return getattr(specs.common_spec.Activation, name)


def _array(variable):
    return np.asarray(variable, dtype=np.float32)


def _set_embedding(stack_spec, embedding_spec, embedding, model):
    """Token table and position rows; CTranslate2 scales tokens by sqrt(D)
    and adds the row of each position, as kseq does."""
    embedding_spec.weight = _array(embedding.embeddings)
    stack_spec.scale_embeddings = bool(embedding.scale_embeddings)
    rows = np.zeros((1, model.max_length, model.d_model), np.float32)
    stack_spec.position_encodings.encodings = _array(embedding.position_embedding(rows)[0])


def _set_attention(spec, attention, norm, fused):
    """Self-attention: one (3D, D) query-key-value projection; attention over
    the source: the query's, then one (2D, D) for keys and values."""
    query, key, value = (_dense(getattr(attention, f"_{name}_dense")) for name in ("query", "key", "value"))
    if fused:
        _set_linear(spec.linear[0], *_stacked(query, key, value))
    else:
        _set_linear(spec.linear[0], *query)
        _set_linear(spec.linear[1], *_stacked(key, value))
    _set_linear(spec.linear[-1], *_dense(attention._output_dense, heads_first=True))
    _set_norm(spec.layer_norm, norm)


def _dense(layer, heads_first=False):
    """A keras layer's (in, out) kernel and its bias, flat: an attention's
    projections keep (in, heads, head width) kernels, its output projection
    (heads, head width, out)."""
    kernel = _array(layer.kernel)
    kernel = kernel.reshape(-1, kernel.shape[-1]) if heads_first else kernel.reshape(kernel.shape[0], -1)
    return kernel, (None if layer.bias is None else _array(layer.bias).reshape(-1))


def _stacked(*kernels_and_biases):
    kernels, biases = zip(*kernels_and_biases)
    return np.concatenate(kernels, axis=1), (None if any(b is None for b in biases) else np.concatenate(biases))


def _set_feed_forward(spec, block):
    _set_linear(spec.linear_0, *_dense(block.feed_forward.inner_dense))
    _set_linear(spec.linear_1, *_dense(block.feed_forward.outer_dense))
    _set_norm(spec.layer_norm, block.feed_forward_norm)


def _set_linear(spec, kernel, bias):
    """CTranslate2 keeps (out, in) weights."""
    spec.weight = np.ascontiguousarray(kernel.T)
    if bias is not None:
        spec.bias = bias


def _set_norm(spec, norm):
    spec.gamma, spec.beta = _array(norm.gamma), _array(norm.beta)


def _converter(spec):
    module = _ctranslate2()

    class KseqConverter(module.converters.Converter):
        def _load(self):
            return spec

    return KseqConverter()


def _ctranslate2():
    if importlib.util.find_spec("ctranslate2") is None:
        raise ImportError("A CTranslate2 export needs ctranslate2: pip install 'kseq[ctranslate2]'.")
    import ctranslate2
    import ctranslate2.converters
    import ctranslate2.specs

    return ctranslate2

