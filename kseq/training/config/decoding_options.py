"""The decoding option groups: a translator's search (its "auto" settings
are chosen on validation pairs, `kseq.training.scoring.selection`) and
seeded sampling of generated text."""

import dataclasses

from kseq.decoding.limits import DEFAULT_LENGTH_SLACK
from kseq.decoding.sampling import Sampler
from kseq.errors import UsageError
from kseq.training.config.options import AUTO, Auto, TaskOptions, option


def _beam_patience_problem(patience):
    """The message refusing `--beam-patience P` outside [0, 1], else None."""
    if 0 <= patience <= 1:
        return None
    return f"--beam-patience {patience}: expected a number in [0, 1] (0: the exact rule)"


@dataclasses.dataclass(frozen=True)
class DecodingOptions(TaskOptions):
    """Decoding: the search tested and exported ("auto": chosen on validation pairs)."""

    beam_size: int | Auto = option(AUTO, "beams (1: greedy); auto: 4 or 1", minimum=1)
    length_penalty: float | Auto = option(
        AUTO, "the beam's length penalty; auto: 0.6, 1.0, 1.5 or 2.0 (0.6 or 1.0 with --beam-patience 0)")
    no_repeat_ngram: int | Auto = option(
        AUTO, "no N tokens twice (0: no limit); auto: no 3 tokens twice or no 4 tokens a third time", minimum=0)
    max_length_ratio: float | Auto = option(
        AUTO, f"outputs end by ceil(ratio x source tokens) + {DEFAULT_LENGTH_SLACK} (0: --max-length alone); "
        "auto: fitted", minimum=0)
    tune_sentences: int = option(200, "validation pairs the auto decoding settings are chosen on", minimum=1)
    beam_patience: float | None = option(
        1.0, "a beam stops a sentence once it holds ceil(P x beams) finished hypotheses (1: as CTranslate2 "
        "and fairseq); 0: only once no alive hypothesis can win (the exact rule: most sentences run on to "
        "their length limit)", check=_beam_patience_problem)


@dataclasses.dataclass(frozen=True)
class SamplingOptions(TaskOptions):
    """Sampling generated text: seeded top-k (`kseq.decoding.Sampler`)."""

    sample_length: int = option(64, "pieces per sample at most", minimum=1)
    temperature: float = option(1.0, "sampling temperature", above=0)
    top_k: int = option(10, "sample among the k likeliest pieces", minimum=1)

    def problems(self):
        """--top-k at most the vocabulary's size, where it is known here (`--vocab-size` without `--tokenizer`)."""
        size = getattr(self, "vocab_size", None)
        if isinstance(size, int) and not getattr(self, "tokenizer", None) and self.top_k > size:
            return super().problems() + [f"--top-k {self.top_k}: over --vocab-size {size}: expected at most the "
                                         "vocabulary's size"]
        return super().problems()

    def check_vocabulary(self, vocab_size):
        """Refuses a --top-k over the vocabulary the run ended with (a given
        tokenizer's, or fewer pieces than --vocab-size from small data).

        Args:
            vocab_size: the tokenizer's size.

        Raises:
            UsageError: --top-k is over it.
        """
        if self.top_k > vocab_size:
            raise UsageError(f"--top-k {self.top_k}: over the vocabulary's {vocab_size} pieces: expected at most "
                             f"{vocab_size}")

    def sampler(self, **search_options):
        """Makes the seeded top-k sampler these options ask for: every row
        differs (greedy decoding would give one text per prompt or label).

        Args:
            **search_options: options every search takes, such as
                `no_repeat_ngram_size`.

        Returns:
            A `kseq.decoding.Sampler` of --sample-length, --temperature,
            --top-k and --seed.
        """
        return Sampler(self.sample_length, temperature=self.temperature, top_k=self.top_k, seed=self.seed,
                       **search_options)
