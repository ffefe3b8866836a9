"""`--init-from DIR`: a run starts from a finished run's architecture,
tokenizer and weights, and refuses what cannot fit, naming the option."""

import dataclasses

import keras
import numpy as np
import pytest

from kseq.data.subword_tokenizer import SubwordTokenizer
from kseq.errors import UsageError
from kseq.training.config import options as opts
from kseq.data.tokenizers import tokenizer_files
from kseq.training.task import compile_model
from kseq.training.vocabulary import run_tokenizer
from kseq.training.objectives.optimizers import FusedAdam
from kseq.training.config.options import option
from kseq.training.config.warm_start import init_weights, keep_trained


@dataclasses.dataclass(frozen=True)
class Toy(opts.TextTaskOptions):
    ARCHITECTURE = ("units",)

    units: int = option(4, "width", minimum=1)
    dropout: float = option(0.0, "dropout rate")
    logdir: str = option("runs/toy", "logs")


@dataclasses.dataclass(frozen=True)
class Other(Toy):
    logdir: str = option("runs/other", "logs")


def toy_model(units, learning_rate=1e-3):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units), keras.layers.Dense(1)])
    compile_model(model, FusedAdam(learning_rate), "mse")
    model.optimizer.build(model.trainable_variables)
    return model


@pytest.fixture
def finished(tmp_path):
    """A finished toy run with --units 6, trained a few steps, and its tokenizer."""
    options = opts.parse(Toy, ["--units", "6", "--logdir", str(tmp_path / "first")])
    model = toy_model(6)
    model.fit(np.ones((8, 3)), np.zeros((8, 1)), epochs=3, verbose=0)
    keep_trained(options, model)
    words = [f"{a}{b}{c}" for a in "abcdefgh" for b in "ijklmnop" for c in "qrstuvwx"]
    tokenizer = SubwordTokenizer.train([" ".join(words[i: i + 9]) for i in range(0, len(words), 3)], 300)
    for name, content in tokenizer_files(tokenizer).items():
        (tmp_path / "first" / name).write_bytes(content)
    return dict(folder=str(tmp_path / "first"), model=model, tokenizer=tokenizer)


def test_the_run_takes_the_architecture_and_keeps_its_own_training_options(finished, tmp_path):
    options = opts.parse(Toy, ["--init-from", finished["folder"], "--dropout", "0.3",
                               "--logdir", str(tmp_path / "second")])
    assert options.units == 6 and options.dropout == 0.3
    assert "units" in options.options_given, "adopted options count as given: no auto resizes them"


def test_the_weights_come_in_and_the_optimizer_starts_afresh(finished):
    model = toy_model(6, learning_rate=5e-4)
    init_weights(model, finished["folder"])
    for mine, theirs in zip(model.weights, finished["model"].weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    assert int(model.optimizer.iterations.numpy()) == 0 and int(finished["model"].optimizer.iterations.numpy()) == 3
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(5e-4)


def test_the_tokenizer_is_the_runs(finished, tmp_path):
    options = opts.parse(Toy, ["--init-from", finished["folder"], "--logdir", str(tmp_path / "second")])
    (tmp_path / "second").mkdir()  # task.start makes it
    tokenizer = run_tokenizer(["other text entirely"], options.logdir, init_from=options.init_from, vocab_size=20)
    assert tokenizer.vocab_size == finished["tokenizer"].vocab_size
    assert (tmp_path / "second" / "spm.model").read_bytes() == (tmp_path / "first" / "spm.model").read_bytes()


def test_weights_of_another_shape_stop_the_run_naming_init_from(finished):
    with pytest.raises(UsageError, match=r"--init-from .*first: its weights do not fit this model \(.*shape"):
        init_weights(toy_model(5), finished["folder"])


@pytest.mark.parametrize("argv, message", [
    (["--init-from", "MISSING"], "--init-from MISSING: no such folder"),
    (["--init-from", "EMPTY"], "no finished run there (no options.json or trained.weights.h5"),
    (["--init-from", "FIRST", "--units", "8"], "--units 8 differs from the --init-from run's 6"),
    (["--init-from", "FIRST", "--tokenizer", "FIRST/spm.model"], "drop --tokenizer"),
])
def test_what_cannot_fit_is_refused_at_parse_time(finished, tmp_path, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    paths = {"MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty"), "FIRST": finished["folder"]}
    argv = [arg.replace("MISSING", paths["MISSING"]).replace("EMPTY", paths["EMPTY"]).replace("FIRST", paths["FIRST"])
            for arg in argv]
    message = message.replace("MISSING", paths["MISSING"])
    with pytest.raises(SystemExit) as exit_info:
        opts.parse(Toy, argv + ["--logdir", str(tmp_path / "second")])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_run_of_another_task_is_refused(finished, tmp_path, capsys):
    with pytest.raises(SystemExit):
        opts.parse(Other, ["--init-from", finished["folder"], "--logdir", str(tmp_path / "second")])
    assert "a run of recipe 'toy', not 'other'" in capsys.readouterr().err
