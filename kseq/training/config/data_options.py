"""The data option groups: the user's files, how much of the training
files is sampled for the vocabulary, how streamed training files are
shuffled, and batches of pairs under a token budget."""

import dataclasses

from kseq.training.config.options import TaskOptions, option


FILES = "a file, a glob or several joined by commas, plain or gzip"


@dataclasses.dataclass(frozen=True)
class TsvFilesOptions(TaskOptions):
    """Your data: lines of two columns split by a tab (without them, the task's own data)."""

    train_tsv: str | None = option(None, f"training lines: {FILES}", files=True)
    valid_tsv: str | None = option(None, "validation lines (default: training lines held out by number)",
                                   files=True)
    test_tsv: str | None = option(None, "test lines (default: the validation lines)", files=True)


@dataclasses.dataclass(frozen=True)
class TextFilesOptions(TaskOptions):
    """Your data: text, a document a line (without it, the task's own data)."""

    train_txt: str | None = option(None, f"training text: {FILES}", files=True)
    valid_txt: str | None = option(None, "validation text (default: training lines held out by number)",
                                   files=True)
    test_txt: str | None = option(None, "test text (default: the validation text)", files=True)


@dataclasses.dataclass(frozen=True)
class VocabularySampleOptions(TaskOptions):
    """The vocabulary's sample: training examples read into memory
    (a uniform sample, `kseq.data.corpus.scan_corpus`)."""

    vocab_sample: int = option(100_000, "training examples drawn uniformly for the vocabulary and the data's "
                               "statistics", minimum=1)


@dataclasses.dataclass(frozen=True)
class StreamedDataOptions(VocabularySampleOptions):
    """Streamed training files: how they are shuffled (`kseq.data.streaming`)."""

    shuffle_buffer: int = option(250_000, "training examples shuffled together (per worker); data no larger is "
                                 "shuffled whole every epoch", minimum=1)


@dataclasses.dataclass(frozen=True)
class TokenBatchOptions(TaskOptions):
    """Batches of pairs by length, under a token budget."""

    token_budget: int = option(2560, "target tokens per batch (shared by the workers of --strategy multiworker)",
                               minimum=1)
    max_length: int = option(96, "tokens per sentence; longer pairs are left out of training", minimum=1)

    def problems(self):
        return super().problems() + (["--token-budget must be >= --max-length"]
                                     if self.token_budget < self.max_length else [])
