"""The decoding option groups: a translator's search (its "auto" settings
are chosen on validation pairs, `kseq.training.scoring.selection`) and
seeded sampling of generated text."""

import dataclasses

from kseq.decoding.limits import DEFAULT_LENGTH_SLACK
from kseq.decoding.sampling import Sampler
from kseq.training.config.options import AUTO, Auto, TaskOptions, option


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
        "their length limit)")

    def problems(self):
        """--beam-patience must be in [0, 1]."""
        found = super().problems()
        if self.beam_patience is not None and not 0 <= self.beam_patience <= 1:
            found.append(f"--beam-patience {self.beam_patience}: expected a number in [0, 1] (0: the exact rule)")
        return found


@dataclasses.dataclass(frozen=True)
class SamplingOptions(TaskOptions):
    """Sampling generated text: seeded top-k (`kseq.decoding.Sampler`)."""

    sample_length: int = option(64, "pieces per sample at most", minimum=1)
    temperature: float = option(1.0, "sampling temperature")
    top_k: int = option(10, "sample among the k likeliest pieces", minimum=1)

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
