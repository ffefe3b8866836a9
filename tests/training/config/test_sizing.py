"""The model's width and dropout from the data's size (kseq.training.config.sizing), and how tasks know
which options the user gave."""

import dataclasses

import pytest
import tensorflow as tf

from kseq.training.config import options as opts
from kseq.training.config.sizing import (
    RNN_MODEL, SMALL_DATA_MODEL, SMALL_DATA_PASSES, choose_model_size, expected_passes, model_for_data,
)

from kseq.tasks import translate  # noqa: E402


def test_passes_are_the_epochs_or_what_the_minutes_allow():
    assert expected_passes(1000, epochs=40) == 40.0
    assert expected_passes(1000, epochs=40, minutes=12, tokens_per_minute=None) == 40.0
    assert expected_passes(600_000, epochs=1000, minutes=12, tokens_per_minute=750_000) == 15.0
    assert expected_passes(6_000_000, epochs=1000, minutes=12, tokens_per_minute=750_000) == 1.5
    assert expected_passes(1000, epochs=3, minutes=12, tokens_per_minute=750_000) == 3.0


def test_a_corpus_larger_than_the_budget_covers_gets_a_fraction_of_a_pass_never_zero():
    """4M Bible pairs (about 180M target tokens) in a minute: 0.00417 passes, the preset's model."""
    passes = expected_passes(180_000_000, epochs=1000, minutes=1, tokens_per_minute=750_000)
    assert passes == 0.00417
    assert model_for_data(passes, "chrf", QUICK) == (QUICK, "the preset's: 0.00417 expected passes over the data "
                                                             "(<= 30)")


@pytest.mark.parametrize("args, message", [
    (dict(train_tokens=0, epochs=1), "train_tokens"),
    (dict(train_tokens=10, epochs=0), "epochs"),
    (dict(train_tokens=10, epochs=1, minutes=0, tokens_per_minute=5), "minutes"),
    (dict(train_tokens=10, epochs=1, minutes=5, tokens_per_minute=-1), "tokens_per_minute"),
])
def test_passes_reject_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        expected_passes(**args)


QUICK = dict(d_model=192, num_heads=4, ff_dim=768, dropout=0.0)


def test_open_text_seen_many_times_gets_a_narrower_model_with_dropout():
    assert model_for_data(SMALL_DATA_PASSES + 1, "chrf", QUICK)[0] == SMALL_DATA_MODEL
    settings, reason = model_for_data(SMALL_DATA_PASSES, "bleu", QUICK)
    assert settings == QUICK and reason == f"the preset's: {SMALL_DATA_PASSES:g} expected passes over the data (<= 30)"
    settings, reason = model_for_data(SMALL_DATA_PASSES + 1, "exact_match", QUICK)
    assert settings == QUICK and "exact match" in reason


def test_small_data_never_widens_the_preset_nor_lowers_its_dropout():
    narrow = dict(d_model=96, num_heads=2, ff_dim=256, dropout=0.5)
    assert model_for_data(100.0, "chrf", narrow)[0] == narrow
    # The gpu preset's 6 heads do not split 128: 4 do.
    gpu = dict(d_model=384, num_heads=6, ff_dim=1536, dropout=0.2)
    assert model_for_data(100.0, "chrf", gpu)[0] == dict(d_model=128, num_heads=4, ff_dim=512, dropout=0.3)
    odd = dict(d_model=90, num_heads=6, ff_dim=360, dropout=0.0)  # 4 heads do not split 90: 3 do
    assert model_for_data(100.0, "chrf", odd)[0] == dict(d_model=90, num_heads=3, ff_dim=360, dropout=0.3)


def test_model_for_data_rejects_bad_arguments():
    with pytest.raises(ValueError, match="passes"):
        model_for_data(float("nan"), "chrf", QUICK)
    with pytest.raises(ValueError, match="passes"):
        model_for_data(0.0, "chrf", QUICK)
    with pytest.raises(ValueError, match="preset.*ff_dim"):
        model_for_data(10.0, "chrf", dict(d_model=192, num_heads=4, dropout=0.0))


@dataclasses.dataclass(frozen=True)
class Options(opts.TaskOptions):
    rate: float = opts.option(0.5, "a rate")
    name: str = opts.option("x", "a name")
    flag: bool = opts.option(False, "a flag")
    width: int = opts.option(1, "a width")


def test_parse_names_the_options_given_on_the_command_line():
    options = opts.parse(Options, ["--rate", "0.1", "--no-flag"], presets={"a": dict(width=3)})
    assert options.options_given == ("flag", "rate")
    assert options.rate == 0.1 and options.width == 3 and options.preset == "a"
    assert opts.parse(Options, []).options_given == ()


class WordTokenizer:
    def tokenize(self, texts):
        return tf.strings.split(tf.constant(texts))


def size_for_data(options, targets, tokenizer, metric):
    """(options resized, metrics.json's entries) as the translation task sizes its model."""
    sizes, decision = choose_model_size(options, tokenizer.tokenize(targets).row_lengths().numpy(), metric)
    return dataclasses.asdict(dataclasses.replace(options, **sizes)), decision.metrics()


def size(argv, targets, metric="chrf"):
    return size_for_data(translate.parse_args(argv), targets, WordTokenizer(), metric)


def test_translate_sizes_the_model_from_the_training_targets():
    small = ["a b c"] * 1000  # 4,000 tokens with EOS: the budget could pass over them 2,250 times, the epochs 1,000
    config, report = size([], small)
    assert report == {"train_target_tokens": 4000, "expected_passes": 1000.0, "model_size": SMALL_DATA_MODEL,
                      "model_size_reason": "small data: 1000 expected passes over the data (> 30)",
                      "model_size_options_given": []}
    assert {name: config[name] for name in SMALL_DATA_MODEL} == SMALL_DATA_MODEL
    # Over-long targets are dropped by the pipeline and not counted.
    assert size(["--max-length", "3"], small + ["a " * 9])[1]["train_target_tokens"] == 4000
    # What the user gives stays; a width given keeps every width as the preset has it.
    config, report = size(["--dropout", "0.05"], small)
    assert config["dropout"] == 0.05 and config["d_model"] == 128 and report["model_size_options_given"] == ["dropout"]
    config, report = size(["--num-layers", "3"], small)
    assert (config["d_model"], config["ff_dim"], config["dropout"]) == (192, 768, 0.3)
    config, report = size(["--arch", "rnn"], small)
    assert config["dropout"] == 0.0 and config["num_layers"] == 1 and report["model_size"] == RNN_MODEL
    assert "RNN" in report["model_size_reason"]
    config, report = size(["--arch", "rnn", "--num-layers", "2"], small)
    assert config["num_layers"] == 2 and report["model_size_options_given"] == ["num_layers"]
    assert size(["--arch", "rnn", "--preset", "gpu"], small)[0]["num_layers"] == 4  # measured on quick alone
    assert size([], small, "exact_match")[0]["d_model"] == 192
    # About the Bible's 1.19M training target tokens: 3.8 passes in the default 6 minutes, the preset.
    config, report = size([], ["w " * 39] * 29_870)
    assert report["expected_passes"] == 3.77 and report["model_size"] == dict(
        d_model=192, num_heads=4, ff_dim=768, dropout=0.0)


@pytest.mark.slow  # 20-40 s: a SentencePiece vocabulary of the real training verses
def test_the_bible_keeps_the_quick_model_and_3000_of_its_verses_get_the_small_one():
    import random

    from kseq.data.bible import load_bible_pairs
    from kseq.data.subword_tokenizer import SubwordTokenizer, vocab_size_for

    sources, targets = load_bible_pairs("train")
    tokenizer = SubwordTokenizer.train(sources + targets, vocab_size_for(sources + targets, 4000))
    config, report = size_for_data(translate.parse_args([]), targets, tokenizer, "chrf")
    assert 6 < report["expected_passes"] < 9, report
    assert report["model_size"] == dict(d_model=192, num_heads=4, ff_dim=768, dropout=0.0)
    few = random.Random(0).sample(targets, 3000)
    config, report = size_for_data(translate.parse_args([]), few, tokenizer, "chrf")
    assert report["expected_passes"] > SMALL_DATA_PASSES and report["model_size"] == SMALL_DATA_MODEL
