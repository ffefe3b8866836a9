"""A Marian checkpoint's tensors (transformers' names) written into a built `TransformerSeq2Seq`.

transformers keeps (out, in) matrices; kseq's attention keeps keras'
(D, heads, head width) kernels for the query, key and value projections and
(heads, head width, D) for the output. Embedding rows are reordered to kseq's
ids (`kseq.data.marian_tokenizer.marian_order`); `final_logits_bias` becomes
the tied output's bias. Every tensor of the file is used once, or is one kseq
derives (the sinusoidal position tables) or ties (the output projection, an
embedding's aliases); any other is another architecture's, and refused.
"""

import numpy as np

from kseq.errors import UsageError

# Tensors kseq derives or ties: the position tables (Marian's sinusoids,
# computed by kseq's layer), and a tied embedding's other names.
DERIVED = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
ALIASES = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
           "lm_head.weight")


class _Tensors:
    """The checkpoint's tensors, each taken once, with shapes checked against kseq's."""

    def __init__(self, tensors, path):
        self.tensors, self.path, self.used = tensors, path, set()

    def take(self, names, shape):
        """The first of `names` the file holds, checked to have `shape`."""
        for name in names:
            if name in self.tensors:
                value = self.tensors[name]
                if tuple(value.shape) != tuple(shape):
                    raise UsageError(f"{self.path}: {name} has shape {tuple(value.shape)}; config.json and the "
                                     f"vocabulary give {tuple(shape)}")
                self.used.add(name)
                return value
        raise UsageError(f"{self.path} has no {names[0]}: weights of another architecture, or a truncated file")

    def refuse_leftovers(self):
        left = sorted(set(self.tensors) - self.used - set(DERIVED) - set(ALIASES))
        if left:
            raise UsageError(f"{self.path}: {left[0]} (and {len(left) - 1} more) has no place in a Marian "
                             "Transformer of config.json's sizes: another architecture, or a config that does "
                             "not match the weights")


def load_marian_weights(model, tensors, source_order, target_order, path):
    """Writes a Marian checkpoint's tensors into `model`.

    Args:
        model: a built `TransformerSeq2Seq` of the checkpoint's arguments
            (`kseq.pretrained.marian_config.read_marian_config`).
        tensors: {transformers' name: float32 array} (`kseq.pretrained.weights.read_weights`).
        source_order, target_order: the Marian id behind each kseq id of
            each side (`MarianTokenizer.order`).
        path: the weights file, for messages.

    Raises:
        UsageError: a tensor missing, of another shape, or one kseq has no place for (named).
    """
    found = _Tensors(tensors, path)
    width = model.d_model
    source_names = ["model.shared.weight", "model.encoder.embed_tokens.weight"]
    source = found.take(source_names if model.share_embeddings else source_names[::-1],
                        (len(source_order) - 1, width))
    _assign(model.source_embedding.embeddings, source[source_order])
    target = source
    if not model.share_embeddings:
        target = found.take(["model.decoder.embed_tokens.weight", "lm_head.weight"], (len(target_order) - 1, width))
        _assign(model.target_embedding.embeddings, target[target_order])
    bias = np.zeros((1, len(target_order) - 1), np.float32)
    if "final_logits_bias" in tensors:
        bias = found.take(["final_logits_bias"], bias.shape)
    _assign(model.output_bias, bias[0][target_order])
    for i, block in enumerate(model.encoder_blocks):
        prefix = f"model.encoder.layers.{i}."
        _attention(found, block.self_attention, prefix + "self_attn", width)
        _norm(found, block.self_attention_norm, prefix + "self_attn_layer_norm", width)
        _feed_forward(found, block, prefix, width)
    for i, block in enumerate(model.decoder_blocks):
        prefix = f"model.decoder.layers.{i}."
        _attention(found, block.self_attention, prefix + "self_attn", width)
        _norm(found, block.self_attention_norm, prefix + "self_attn_layer_norm", width)
        _attention(found, block.cross_attention, prefix + "encoder_attn", width)
        _norm(found, block.cross_attention_norm, prefix + "encoder_attn_layer_norm", width)
        _feed_forward(found, block, prefix, width)
    found.refuse_leftovers()


def _assign(variable, value):
    variable.assign(np.asarray(value, np.float32).reshape(variable.shape))


def _linear(found, name, out_width, in_width):
    """transformers' (out, in) weight and its bias, as keras' (in, out) kernel and bias."""
    weight = found.take([name + ".weight"], (out_width, in_width))
    return weight.T, found.take([name + ".bias"], (out_width,))


def _attention(found, layer, name, width):
    heads, head_width = layer._query_dense.kernel.shape[1:]
    for projection, dense in (("q_proj", layer._query_dense), ("k_proj", layer._key_dense),
                              ("v_proj", layer._value_dense)):
        kernel, bias = _linear(found, f"{name}.{projection}", heads * head_width, width)
        _assign(dense.kernel, kernel)
        _assign(dense.bias, bias)
    kernel, bias = _linear(found, f"{name}.out_proj", width, heads * head_width)
    _assign(layer._output_dense.kernel, kernel)
    _assign(layer._output_dense.bias, bias)


def _norm(found, norm, name, width):
    _assign(norm.gamma, found.take([name + ".weight"], (width,)))
    _assign(norm.beta, found.take([name + ".bias"], (width,)))


def _feed_forward(found, block, prefix, width):
    inner, outer, hidden = block.feed_forward.inner_dense, block.feed_forward.outer_dense, block.ff_dim
    for dense, name, shape in ((inner, "fc1", (hidden, width)), (outer, "fc2", (width, hidden))):
        kernel, bias = _linear(found, prefix + name, *shape)
        _assign(dense.kernel, kernel)
        _assign(dense.bias, bias)
    _norm(found, block.feed_forward_norm, prefix + "final_layer_norm", width)
