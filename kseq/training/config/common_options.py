"""Option groups several recipes share; each recipe gives them its own
defaults (`kseq.training.config.options.recipe_options`)."""

import dataclasses

from kseq.training.config.options import RecipeOptions, option
from kseq.training.progress import parse_cadence


@dataclasses.dataclass(frozen=True)
class RNNOptions(RecipeOptions):
    """A recurrent model's options."""

    ARCHITECTURE = ("cell", "num_layers", "embed_dim", "units")

    cell: str = option("lstm", "the RNN's cell", choices=("rnn", "lstm", "gru"))
    num_layers: int = option(1, "recurrent layers", minimum=1)
    embed_dim: int = option(128, "embedding width", minimum=1)
    units: int = option(128, "the RNN's units", minimum=1)
    dropout: float = option(0.0, "dropout rate")


@dataclasses.dataclass(frozen=True)
class ClippingOptions(RecipeOptions):
    """--clipnorm, the same in every task: one global norm over all the
    weights' gradients (keras' `global_clipnorm`), taken after the replicas'
    gradients are summed, so that it clips as one device would."""

    clipnorm: float = option(1.0, "clip the gradient to this global norm (all weights' gradients as one vector)")


@dataclasses.dataclass(frozen=True)
class TrainingOptions(ClippingOptions):
    """The vocabulary, the batches and Adam's settings of a recipe that trains on text."""

    vocab_size: int = option(4000, "SentencePiece pieces", minimum=1)
    batch_size: int = option(32, "examples (or parallel streams) per batch", minimum=1)
    epochs: int = option(10, "epochs at most", minimum=1)
    learning_rate: float = option(1e-3, "Adam's learning rate")


@dataclasses.dataclass(frozen=True)
class SamplingOptions(RecipeOptions):
    """Seeded top-k sampling of generated text (kseq.decoding.Sampler)."""

    sample_length: int = option(64, "pieces per sample at most", minimum=1)
    temperature: float = option(1.0, "sampling temperature")
    top_k: int = option(10, "sample among the k likeliest pieces", minimum=1)


@dataclasses.dataclass(frozen=True)
class EpochCadenceOptions(RecipeOptions):
    """When a recipe that trains in epochs (`EpochFit`) evaluates and saves:
    at epoch ends by default, or inside long epochs."""

    eval_every: str = option("epoch", "evaluate at each epoch's end (epoch), every N steps (500) or minutes (5m)")
    save_every: str = option("epoch", "save at each evaluation only (epoch), or also every N steps (200)")

    @property
    def fit_cadence(self):
        """`EpochFit`'s eval_every and save_every."""
        save = self.save_every.strip().lower()
        return {"eval_every": self.eval_every, "save_every": save if save == "epoch" else int(save)}

    def problems(self):
        found = super().problems()
        try:
            parse_cadence(self.eval_every, getattr(self, "max_minutes", None))
        except ValueError as error:
            found.append(f"--eval-every: {error}")
        save = self.save_every.strip().lower()
        if save != "epoch" and not (save.isdigit() and int(save) > 0):
            found.append(f"--save-every must be 'epoch' or a positive number of steps; got {self.save_every!r}")
        return found


@dataclasses.dataclass(frozen=True)
class VocabularySampleOptions(RecipeOptions):
    """How much of the training files a streaming recipe reads into memory
    for its vocabulary (a uniform sample, `kseq.data.corpus.scan_corpus`)."""

    vocab_sample: int = option(100_000, "training examples drawn uniformly for the vocabulary and the data's "
                               "statistics", minimum=1)


@dataclasses.dataclass(frozen=True)
class StreamedDataOptions(VocabularySampleOptions):
    """How a recipe that streams its training files (`kseq.data.streaming`)
    shuffles them and samples them for the vocabulary."""

    shuffle_buffer: int = option(250_000, "training examples shuffled together (per worker); data no larger is "
                                 "shuffled whole every epoch", minimum=1)
