"""kseq models: sequence-to-sequence with RNNs and Transformers."""

from kseq.models.rnn_seq2seq import RNNSeq2Seq
from kseq.models.transformer_seq2seq import TransformerSeq2Seq

__all__ = ["RNNSeq2Seq", "TransformerSeq2Seq"]
