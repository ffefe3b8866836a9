"""kseq models: sequence-to-sequence, language models, classifiers and conditioned generators."""

from kseq.models.conditioned_generator import ConditionedGenerator
from kseq.models.rnn_language_model import RNNLanguageModel
from kseq.models.rnn_seq2seq import RNNSeq2Seq
from kseq.models.sequence_classifier import SequenceClassifier
from kseq.models.transformer_seq2seq import TransformerSeq2Seq

__all__ = ["ConditionedGenerator", "RNNLanguageModel", "RNNSeq2Seq", "SequenceClassifier", "TransformerSeq2Seq"]
