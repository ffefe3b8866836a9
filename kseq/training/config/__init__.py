"""A task's options: typed dataclasses parsed from flags, `--config` files and
presets (`parse`, `option`), the groups several tasks share, `--init-from`,
and the model size chosen from the data."""

from kseq.training.config.common_options import (
    ClippingOptions,
    EpochCadenceOptions,
    RNNOptions,
    SamplingOptions,
    StreamedDataOptions,
    TrainingOptions,
    VocabularySampleOptions,
)
from kseq.training.config.config_files import read_config, write_config
from kseq.training.config.flags import flag
from kseq.training.config.options import (
    AUTO,
    Auto,
    RecipeOptions,
    TextRecipeOptions,
    option,
    parse,
)
from kseq.training.config.seq2seq_options import ATTENTIONS, Seq2SeqOptions
from kseq.training.config.sizing import choose_model_size
from kseq.training.config.warm_start import OPTIONS_FILE, TRAINED_WEIGHTS, keep_trained

__all__ = [
    "ATTENTIONS",
    "AUTO",
    "Auto",
    "ClippingOptions",
    "EpochCadenceOptions",
    "RNNOptions",
    "RecipeOptions",
    "SamplingOptions",
    "Seq2SeqOptions",
    "StreamedDataOptions",
    "OPTIONS_FILE",
    "TRAINED_WEIGHTS",
    "TextRecipeOptions",
    "TrainingOptions",
    "VocabularySampleOptions",
    "choose_model_size",
    "flag",
    "keep_trained",
    "option",
    "parse",
    "read_config",
    "write_config",
]
