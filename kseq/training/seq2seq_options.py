"""A translation recipe's model: its options and the model they build."""

import dataclasses

from kseq.models import RNNSeq2Seq, TransformerSeq2Seq
from kseq.training.options import RecipeOptions, option

ATTENTIONS = ("none", "dot", "general", "concat", "bahdanau")


@dataclasses.dataclass(frozen=True)
class Seq2SeqOptions(RecipeOptions):
    """The Transformer's or the RNN's options; `build` makes the model."""

    ARCHITECTURE = ("arch", "attention", "cell", "input_feeding", "num_layers", "d_model", "num_heads", "ff_dim",
                    "embed_dim", "units")

    arch: str = option("transformer", "model", choices=("transformer", "rnn"))
    attention: str = option("general", "the RNN's attention", choices=ATTENTIONS)
    cell: str = option("lstm", "the RNN's cell", choices=("rnn", "lstm", "gru"))
    input_feeding: bool = option(False, "Luong input feeding (RNN with dot, general or concat attention)")
    num_layers: int = option(2, "layers of the encoder and of the decoder", minimum=1)
    d_model: int = option(192, "the Transformer's width", minimum=1)
    num_heads: int = option(4, "the Transformer's attention heads", minimum=1)
    ff_dim: int = option(768, "the Transformer's feed-forward width", minimum=1)
    dropout: float = option(0.0, "dropout rate")
    embed_dim: int = option(192, "the RNN's embedding width", minimum=1)
    units: int = option(256, "the RNN's units", minimum=1)

    @property
    def has_attention(self):
        return self.arch == "transformer" or self.attention != "none"

    def problems(self):
        feeds = self.arch == "rnn" and self.attention in ("dot", "general", "concat")
        if self.input_feeding and not feeds:
            return super().problems() + ["--input-feeding needs --arch rnn and --attention dot, general or concat"]
        return super().problems()

    def build(self, vocab_size, max_length, dtype=None):
        """The model, one vocabulary for both sides (`max_length` tokens at most for the Transformer)."""
        if self.arch == "transformer":
            return TransformerSeq2Seq(
                vocab_size, vocab_size, num_layers=self.num_layers, d_model=self.d_model,
                num_heads=self.num_heads, ff_dim=self.ff_dim, dropout=self.dropout, max_length=max_length,
                share_embeddings=True, dtype=dtype)
        return RNNSeq2Seq(
            vocab_size, vocab_size, embed_dim=self.embed_dim, units=self.units, cell=self.cell,
            num_layers=self.num_layers, attention=None if self.attention == "none" else self.attention,
            input_feeding=self.input_feeding, dropout=self.dropout, dtype=dtype)
