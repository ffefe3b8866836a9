"""The models' option groups: a recurrent network's, and a translator's
(Transformer or RNN), which builds its model."""

import dataclasses

from kseq.models import RNNSeq2Seq, TransformerSeq2Seq
from kseq.training.config.options import TaskOptions, option
from kseq.training.devices.xla import BLOCKS

ATTENTIONS = ("none", "dot", "general", "concat", "bahdanau")
# What "auto" precision takes for the RNN translator on a CPU with bfloat16
# units (benchmarks/RESULTS.md, "Precision").
RNN_PRECISION = "float32: the RNN translator learned more in its 12 minutes in float32 than under mixed_bfloat16"


@dataclasses.dataclass(frozen=True)
class RNNOptions(TaskOptions):
    """The recurrent model."""

    ARCHITECTURE = ("cell", "num_layers", "embed_dim", "units")

    cell: str = option("lstm", "the RNN's cell", choices=("rnn", "lstm", "gru"))
    num_layers: int = option(1, "recurrent layers", minimum=1)
    embed_dim: int = option(128, "embedding width", minimum=1)
    units: int = option(128, "the RNN's units", minimum=1)
    dropout: float = option(0.0, "dropout rate")


@dataclasses.dataclass(frozen=True)
class Seq2SeqOptions(TaskOptions):
    """The translator: a Transformer or an RNN with attention; `build` makes it."""

    ARCHITECTURE = ("arch", "attention", "cell", "input_feeding", "num_layers", "d_model", "num_heads", "ff_dim",
                    "embed_dim", "units", "bidirectional", "peeky", "reverse_source")

    arch: str = option("transformer", "model", choices=("transformer", "rnn"))
    attention: str = option("concat", "the RNN's attention (concat: the best measured, README)", choices=ATTENTIONS)
    cell: str = option("lstm", "the RNN's cell", choices=("rnn", "lstm", "gru"))
    input_feeding: bool = option(False, "Luong input feeding (RNN with dot, general or concat attention)")
    num_layers: int = option(2, "layers of the encoder and of the decoder", minimum=1)
    d_model: int = option(192, "the Transformer's width", minimum=1)
    num_heads: int = option(4, "the Transformer's attention heads", minimum=1)
    ff_dim: int = option(768, "the Transformer's feed-forward width", minimum=1)
    dropout: float = option(0.0, "dropout rate")
    embed_dim: int = option(192, "the RNN's embedding width", minimum=1)
    units: int = option(256, "the RNN's units", minimum=1)
    bidirectional: bool = option(False, "a bidirectional RNN encoder")
    peeky: bool = option(False, "the RNN encoder's context vector at every decoder step")
    reverse_source: bool = option(False, "the RNN reads each source backwards (Sutskever et al.)")
    embedding_stddev: float = option(1.0, "the RNN's embeddings start from N(0, stddev^2)")

    @property
    def bfloat16_cpu(self):
        """What was measured of the model under mixed_bfloat16 on a CPU with
        bfloat16 units (`kseq.training.task.start`)."""
        return True if self.arch == "transformer" else RNN_PRECISION

    @property
    def without_transformer_blocks(self):
        return None if self.arch == "transformer" else "--arch rnn builds none"

    @property
    def has_attention(self):
        return self.arch == "transformer" or self.attention != "none"

    def problems(self):
        feeds = self.arch == "rnn" and self.attention in ("dot", "general", "concat")
        if self.input_feeding and not feeds:
            return super().problems() + ["--input-feeding needs --arch rnn and --attention dot, general or concat"]
        rnn_only = [name for name in ("bidirectional", "peeky", "reverse_source") if getattr(self, name)]
        if rnn_only and self.arch != "rnn":
            return super().problems() + [f"--{rnn_only[0].replace('_', '-')} needs --arch rnn"]
        if not self.embedding_stddev > 0:
            return super().problems() + ["--embedding-stddev must be > 0"]
        return super().problems()

    def build(self, vocab_size, max_length, dtype=None):
        """The model, one vocabulary for both sides.

        Args:
            vocab_size: ids of the joint vocabulary.
            max_length: the Transformer's longest sequence (BOS included).
            dtype: the dtype policy (None: keras' global one).

        Returns:
            An unbuilt `TransformerSeq2Seq` (its blocks compiled with
            `--jit-compile blocks`) or `RNNSeq2Seq`.
        """
        if self.arch == "transformer":
            return TransformerSeq2Seq(
                vocab_size, vocab_size, num_layers=self.num_layers, d_model=self.d_model,
                num_heads=self.num_heads, ff_dim=self.ff_dim, dropout=self.dropout, max_length=max_length,
                share_embeddings=True, compiled_blocks=self.jit_compile == BLOCKS, dtype=dtype)
        return RNNSeq2Seq(
            vocab_size, vocab_size, embed_dim=self.embed_dim, units=self.units, cell=self.cell,
            num_layers=self.num_layers, attention=None if self.attention == "none" else self.attention,
            input_feeding=self.input_feeding, bidirectional=self.bidirectional, peeky=self.peeky,
            reverse_source=self.reverse_source, dropout=self.dropout, embedding_stddev=self.embedding_stddev,
            dtype=dtype)
