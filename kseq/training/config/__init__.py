"""A task's options, in one place: typed dataclasses parsed from flags,
`--config` files and presets (`parse`, `option`, `task_options`), the
option groups by concern (model, training, data, decoding), `--init-from`,
and the model size chosen from the data."""

from kseq.training.config.config_files import read_config, write_config
from kseq.training.config.data_options import (
    StreamedDataOptions,
    TextFilesOptions,
    TokenBatchOptions,
    TsvFilesOptions,
    VocabularySampleOptions,
)
from kseq.training.config.decoding_options import DecodingOptions, SamplingOptions
from kseq.training.config.flags import flag
from kseq.training.config.model_options import ATTENTIONS, RNNOptions, Seq2SeqOptions, heads_problem
from kseq.training.config.options import (
    AUTO,
    Auto,
    TaskOptions,
    TextTaskOptions,
    option,
    options_parser,
    parse,
    refusal,
    task_options,
)
from kseq.training.config.paths import readable_folder_problems, writable_folder_problems
from kseq.training.config.pretrained_options import checkpoint_problem, pretrained_problems
from kseq.training.config.sizing import choose_model_size
from kseq.training.config.training_options import (
    METRICS,
    SMALLEST_VOCABULARY,
    CadenceOptions,
    ClippingOptions,
    EvaluationOptions,
    ScheduleOptions,
    StoppingOptions,
    TrainingOptions,
)
from kseq.training.config.warm_start import OPTIONS_FILE, TRAINED_WEIGHTS, finished_run, keep_trained

__all__ = [
    "ATTENTIONS",
    "AUTO",
    "Auto",
    "CadenceOptions",
    "ClippingOptions",
    "DecodingOptions",
    "EvaluationOptions",
    "METRICS",
    "OPTIONS_FILE",
    "RNNOptions",
    "SMALLEST_VOCABULARY",
    "SamplingOptions",
    "ScheduleOptions",
    "Seq2SeqOptions",
    "StoppingOptions",
    "StreamedDataOptions",
    "TRAINED_WEIGHTS",
    "TaskOptions",
    "TextFilesOptions",
    "TextTaskOptions",
    "TokenBatchOptions",
    "TrainingOptions",
    "TsvFilesOptions",
    "VocabularySampleOptions",
    "checkpoint_problem",
    "choose_model_size",
    "finished_run",
    "flag",
    "heads_problem",
    "keep_trained",
    "option",
    "options_parser",
    "parse",
    "read_config",
    "readable_folder_problems",
    "refusal",
    "task_options",
    "writable_folder_problems",
    "write_config",
    "pretrained_problems",
]
