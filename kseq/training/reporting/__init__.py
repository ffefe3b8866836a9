"""What a run tells: TensorBoard's HParams and graph, attention images, and
the decisions ("auto" made concrete, with the reason) in metrics.json."""

from kseq.training.reporting.attention_overlay import attention_overlay, write_image_attention
from kseq.training.reporting.decisions import Decision, as_hparams, as_metrics
from kseq.training.reporting.plotting import attention_image
from kseq.training.reporting.tensorboard import write_hparams, write_model_graph

__all__ = [
    "Decision",
    "as_hparams",
    "as_metrics",
    "attention_image",
    "attention_overlay",
    "write_hparams",
    "write_image_attention",
    "write_model_graph",
]
