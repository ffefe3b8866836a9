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
# What an option of one architecture needs (`option(..., needs=...)`).
RNN, TRANSFORMER = {"arch": "rnn"}, {"arch": "transformer"}


def heads_problem(heads_flag, heads, width_flag, width):
    """The message for attention heads that do not split the width evenly.

    Args:
        heads_flag, heads: the heads' option and value.
        width_flag, width: the width's option and value.

    Returns:
        "--num-heads 5: does not divide --d-model 192: expected a divisor of 192, such as 4 or 6".
    """
    divisors = [n for n in range(1, width + 1) if width % n == 0]
    below = max(n for n in divisors if n < heads)
    above = min((n for n in divisors if n > heads), default=None)
    such = f"{below} or {above}" if above else str(below)
    return f"{heads_flag} {heads}: does not divide {width_flag} {width}: expected a divisor of {width}, such as {such}"


@dataclasses.dataclass(frozen=True)
class RNNOptions(TaskOptions):
    """The recurrent model."""

    ARCHITECTURE = ("cell", "num_layers", "embed_dim", "units")

    cell: str = option("lstm", "the RNN's cell", choices=("rnn", "lstm", "gru"))
    num_layers: int = option(1, "recurrent layers", minimum=1)
    embed_dim: int = option(128, "embedding width", minimum=1)
    units: int = option(128, "the RNN's units", minimum=1)
    dropout: float = option(0.0, "dropout rate", minimum=0, below=1)


@dataclasses.dataclass(frozen=True)
class Seq2SeqOptions(TaskOptions):
    """The translator: a Transformer or an RNN with attention; `build` makes it."""

    ARCHITECTURE = ("arch", "attention", "cell", "input_feeding", "num_layers", "d_model", "num_heads", "ff_dim",
                    "embed_dim", "units", "bidirectional", "peeky", "reverse_source")

    arch: str = option("transformer", "model", choices=("transformer", "rnn"))
    attention: str = option("concat", "the RNN's attention (concat: the best measured, README)", choices=ATTENTIONS,
                            needs=RNN)
    cell: str = option("lstm", "the RNN's cell", choices=("rnn", "lstm", "gru"), needs=RNN)
    input_feeding: bool = option(False, "Luong input feeding (RNN with dot, general or concat attention)",
                                 needs={**RNN, "attention": ("dot", "general", "concat")})
    num_layers: int = option(2, "layers of the encoder and of the decoder", minimum=1)
    d_model: int = option(192, "the Transformer's width", minimum=1, needs=TRANSFORMER)
    num_heads: int = option(4, "the Transformer's attention heads (they split --d-model)", minimum=1,
                            needs=TRANSFORMER)
    ff_dim: int = option(768, "the Transformer's feed-forward width", minimum=1, needs=TRANSFORMER)
    dropout: float = option(0.0, "dropout rate", minimum=0, below=1)
    embed_dim: int = option(192, "the RNN's embedding width", minimum=1, needs=RNN)
    units: int = option(256, "the RNN's units", minimum=1, needs=RNN)
    bidirectional: bool = option(False, "a bidirectional RNN encoder", needs=RNN)
    peeky: bool = option(False, "the RNN encoder's context vector at every decoder step", needs=RNN)
    reverse_source: bool = option(False, "the RNN reads each source backwards (Sutskever et al.)", needs=RNN)
    embedding_stddev: float = option(1.0, "the RNN's embeddings start from N(0, stddev^2)", above=0, needs=RNN)

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
        found = super().problems()
        if self.arch == "transformer" and self.num_heads > 0 and self.d_model % self.num_heads:
            found.append(heads_problem("--num-heads", self.num_heads, "--d-model", self.d_model))
        return found

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
