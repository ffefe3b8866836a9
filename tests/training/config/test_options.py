"""A task's typed options (kseq.training.config.options), its decisions
(kseq.training.reporting.decisions) and the option groups with the policies
that read them: decoding, stopping, cadence, the seq2seq model."""

import dataclasses
import os
import sys
import types

import pytest

from kseq.models import RNNSeq2Seq, TransformerSeq2Seq
from kseq.training.config import options as opts
from kseq.training.config import DecodingOptions, EvaluationOptions, Seq2SeqOptions, StoppingOptions
from kseq.training.reporting.decisions import Decision, as_hparams, as_metrics
from kseq.training.objectives.schedules import RNN_LEARNING_RATE, Scaled, TransformerSchedule, translation_learning_rate
from kseq.training.scoring.averaging import recent_weights
from kseq.training.scoring.selection import (
    LENGTH_HEADROOM, DecodingSettings, choose_decoding, decoding_candidates, fitted_length_ratio,
)
from kseq.training.loop.stopping import KeepBest, keep_best, sampling_noise
from kseq.training.devices.xla import JitDecision, check_replicas, decide_for_translation


@dataclasses.dataclass(frozen=True)
class Options(opts.TextTaskOptions):
    """Test options.

    Their epilog.
    """

    data: str | None = opts.option(None, "a data file", file=True)
    beams: int | opts.Auto = opts.option(opts.AUTO, "beams", minimum=1)
    rate: float | None = opts.option(None, "a rate")
    layers: int = opts.option(2, "layers", minimum=1)
    kind: str = opts.option("a", "a kind", choices=("a", "b"))
    tied: bool = opts.option(True, "tie weights")
    prompts: tuple = ("one", "two")  # no command-line option

    def problems(self):
        return super().problems() + (["--kind b needs --layers >= 3"] if self.kind == "b" and self.layers < 3 else [])


def parse_error(capsys, argv, presets=None):
    with pytest.raises(SystemExit) as exit_info:
        opts.parse(Options, argv, presets=presets)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_defaults_then_preset_then_command_line():
    presets = {"small": {}, "big": dict(layers=6, rate=0.5)}
    options = opts.parse(Options, ["--preset", "big", "--layers", "3", "--no-tied", "--beams", "4"], presets=presets)
    assert (options.layers, options.rate, options.tied, options.beams) == (3, 0.5, False, 4)
    assert options.preset == "big" and options.options_given == ("beams", "layers", "tied")
    default = opts.parse(Options, [], presets=presets)
    assert (default.preset, default.layers, default.beams, default.prompts) == ("small", 2, "auto", ("one", "two"))
    assert opts.parse(Options, ["--beams", "auto"]).beams == "auto"
    assert default.as_hparams()["prompts"] == ("one", "two"), "a plain field is still a setting"
    assert "options_given" not in default.as_hparams() and default.as_hparams()["layers"] == 2


def test_bad_values_fail_at_parse_time_naming_the_option(capsys, tmp_path):
    assert "--beams must be auto or >= 1" in parse_error(capsys, ["--beams", "0"])
    assert "--layers must be >= 1" in parse_error(capsys, ["--layers", "0"])
    assert "argument --beams: invalid auto or int value: 'many'" in parse_error(capsys, ["--beams", "many"])
    assert "argument --kind: invalid choice: 'c'" in parse_error(capsys, ["--kind", "c"])
    assert "--kind b needs --layers >= 3" in parse_error(capsys, ["--kind", "b"])
    assert "unrecognized arguments: --prompts" in parse_error(capsys, ["--prompts", "x"])
    assert "no such file" in parse_error(capsys, ["--data", str(tmp_path / "missing.txt")])
    assert "is a directory, not a file" in parse_error(capsys, ["--data", str(tmp_path)])
    assert "--tokenizer a,b: a: no such file or folder" in parse_error(capsys, ["--tokenizer", "a,b"])
    (tmp_path / "file").write_text("x")
    assert "exists and is not a directory" in parse_error(capsys, ["--logdir", str(tmp_path / "file")])
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "saved_model.pb").write_bytes(b"")
    assert "is itself a SavedModel version" in parse_error(capsys, ["--export-dir", str(tmp_path / "1")])


def test_a_preset_that_names_no_option_is_an_error(capsys):
    message = parse_error(capsys, [], presets={"typo": dict(layerz=3)})
    assert "preset 'typo' names no option: layerz" in message


def test_a_mistyped_option_gets_one_usage_line_and_the_closest_options(capsys):
    prog = os.path.basename(sys.argv[0])  # argparse's default name
    err = parse_error(capsys, ["--layrs", "3", "--tide", "--nothing-near"])
    assert err.splitlines() == [
        f"usage: {prog} [-h] [--config FILE] [OPTION ...]",
        f"{prog}: error: unrecognized arguments: --layrs 3 --tide --nothing-near (did you mean --layers? --tied?)"]
    assert "did you mean" not in parse_error(capsys, ["--zzzzzz"])


def test_help_lists_every_option_with_its_text_and_default(capsys):
    with pytest.raises(SystemExit):
        opts.parse(Options, ["--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage:") and "Test options." in text and "Their epilog." in text
    assert "--beams BEAMS" in text and "beams (default: auto)" in text and "--no-tied" in text


def test_a_decision_prints_writes_metrics_and_hparams_alike():
    size = Decision("model_size", {"d_model": 128}, "small data", {"expected_passes": 40.0})
    metric = Decision("metric", "chrf", "asked for")
    assert str(metric) == "metric: chrf (asked for)"
    assert as_metrics([metric, size]) == {
        "metric": "chrf", "metric_reason": "asked for", "model_size": {"d_model": 128},
        "model_size_reason": "small data", "expected_passes": 40.0}
    assert as_hparams([metric, size]) == {"metric": "chrf", "model_size": {"d_model": 128}}


def test_decoding_candidates_and_the_fitted_length_ratio():
    every = decoding_candidates()
    assert len(every) == 2 * 2 + 2 and every[0] == DecodingSettings(4, 0.6, 4, 2, None)
    assert {c.length_penalty for c in every if c.beam_size == 1} == {0.6}, "greedy once per n-gram limit"
    assert decoding_candidates(1, 1.0, 3, 1.2) == [DecodingSettings(1, 1.0, 3, 1, 1.2)]
    assert fitted_length_ratio(0, [4], [9]) == (None, "asked for")
    ratio, reason = fitted_length_ratio("auto", [10, 4], [12, 9])
    assert ratio == pytest.approx(1.1 * LENGTH_HEADROOM, abs=0.1) and "all 2 validation pairs" in reason
    assert DecodingSettings(1, 0.6, 3, 1, None).search(20).max_length == 20


def test_decoding_is_asked_for_or_the_best_on_validation_pairs(capsys):
    valid = (["a", "b", "c"], ["A", "B", "C"])

    def translator_for(settings):  # beam 4 with penalty 1.0 translates right
        right = settings.beam_size == 4 and settings.length_penalty == 1.0
        return lambda sources: [s.upper() if right else s for s in sources]

    given = DecodingOptions(beam_size=1, length_penalty=0.6, no_repeat_ngram=0, max_length_ratio=0)
    settings, decision = choose_decoding(given, [1] * 3, [1] * 3, translator_for, valid, "exact_match")
    assert settings == DecodingSettings(1, 0.6, 0, 1, None) and decision.reason == "asked for"
    tuned = DecodingOptions(no_repeat_ngram=0, max_length_ratio=0, tune_sentences=2)
    settings, decision = choose_decoding(tuned, [1] * 3, [1] * 3, translator_for, valid, "exact_match")
    assert (settings.beam_size, settings.length_penalty) == (4, 1.0)
    assert decision.value == dataclasses.asdict(settings)
    assert decision.reason == "best exact_match on 2 validation pairs"
    assert len(decision.details["decoding_candidates"]) == 4 + 1 and decision.details["max_length_ratio_reason"]
    assert settings.patience == 1.0, "a beam stops at 4 finished hypotheses unless asked"
    exact = DecodingOptions(no_repeat_ngram=0, max_length_ratio=0, tune_sentences=2, beam_patience=0)
    settings, decision = choose_decoding(exact, [1] * 3, [1] * 3, translator_for, valid, "exact_match")
    assert settings == DecodingSettings(4, 1.0, 0, 1, None, patience=None), "0: the exact rule"
    assert [row["length_penalty"] for row in decision.details["decoding_candidates"]] == [0.6, 1.0, 0.6]


def test_the_learning_rate_decision():
    schedule, decision = translation_learning_rate("transformer", 64, 10, "chrf")
    assert isinstance(schedule, Scaled) and isinstance(schedule.schedule, TransformerSchedule)
    assert decision.metrics() == {"lr_scale": 1.0, "lr_scale_reason": "auto: chrf data"}
    schedule, decision = translation_learning_rate("rnn", 64, 10, "exact_match")
    assert float(schedule(0)) == pytest.approx(RNN_LEARNING_RATE / 2) and decision.value == 0.5
    schedule, decision = translation_learning_rate("rnn", 64, 10, "exact_match", scale=2.0, rate=0.01)
    assert float(schedule(0)) == pytest.approx(0.01) and decision.reason == "--learning-rate given"


def test_the_xla_decision_for_translation_and_its_replica_check():
    assert decide_for_translation("off", 96, 12.0, "transformer") == JitDecision("off", False, "asked for")
    assert decide_for_translation("on", 96, 12.0, "rnn").use
    two_cpus = types.SimpleNamespace(num_replicas_in_sync=2, extended=types.SimpleNamespace(
        worker_devices=("/job:localhost/device:CPU:0", "/job:localhost/device:CPU:1")))
    auto = check_replicas(JitDecision("auto", True, "measured"), two_cpus)
    assert not auto.use and "2 CPU replicas" in auto.reason
    with pytest.raises(SystemExit, match="--jit-compile on cannot train 2 replicas"):
        check_replicas(JitDecision("on", True, "asked for"), two_cpus)
    one = types.SimpleNamespace(num_replicas_in_sync=1)
    assert check_replicas(JitDecision("on", True, "asked for"), one).use


def test_stopping_options_make_keep_best_and_snapshots(tmp_path):
    options = StoppingOptions(patience=2, lr_decay=1.0)
    keep = keep_best(options, str(tmp_path), "exact_match", 200, lr_factor=object())
    assert isinstance(keep, KeepBest) and (keep.monitor, keep.mode, keep.patience) == ("val_exact_match", "max", 2)
    assert keep.lr_factor is None, "--lr-decay 1: never lowered"
    assert keep_best(options, str(tmp_path), "chrf", 200).monitor == "val_loss"
    assert sampling_noise("val_loss", 200) is None
    assert recent_weights(options) is None
    assert recent_weights(StoppingOptions(average_snapshots=3, snapshot_every=5)).every == 5
    assert recent_weights(StoppingOptions(average_snapshots=3, strategy="multiworker")) is None
    assert StoppingOptions(lr_decay=0.0).problems() == ["--lr-decay must be in (0, 1]; got 0.0"]


def test_cadence_options():
    assert str(EvaluationOptions(eval_every="auto", max_minutes=12.0).cadence) == \
        "every 2 min, longer where an evaluation would take over 10% of the time"
    assert str(EvaluationOptions(eval_every="2m").cadence) == "every 2 min"
    assert str(EvaluationOptions(eval_every="auto", max_minutes=5.0).cadence).startswith("every 0.833 min, longer")
    assert EvaluationOptions(eval_every="auto", max_minutes=12.0).decoding_seconds == 12.0
    assert EvaluationOptions(eval_every="500").decoding_seconds == 30.0
    assert EvaluationOptions(eval_every="500", eval_seconds=5.0).decoding_seconds == 5.0
    assert EvaluationOptions(eval_every="soon").problems()[0].startswith("--eval-every: `eval_every` must be")
    assert EvaluationOptions(anneal=1.0).problems() == [
        "--anneal must be in [0, 1); got 1.0"]
    assert EvaluationOptions(anneal=0.2, anneal_shape="cosine").problems() == []


def test_seq2seq_options_build_the_model_they_name():
    transformer = Seq2SeqOptions(num_layers=1, d_model=16, num_heads=2, ff_dim=32).build(40, 25)
    assert isinstance(transformer, TransformerSeq2Seq) and transformer.max_length == 25
    rnn = Seq2SeqOptions(arch="rnn", attention="none", embed_dim=8, units=8).build(40, 25)
    assert isinstance(rnn, RNNSeq2Seq) and rnn.attention is None
    assert not Seq2SeqOptions(arch="rnn", attention="none").has_attention
    assert Seq2SeqOptions(input_feeding=True).problems() == [
        "--input-feeding needs --arch rnn and --attention dot, general or concat"]
    assert Seq2SeqOptions(arch="rnn", attention="dot", input_feeding=True).problems() == []
    rnn = Seq2SeqOptions(arch="rnn", attention="none", embed_dim=8, units=8, bidirectional=True, peeky=True,
                         reverse_source=True, embedding_stddev=0.5).build(40, 25)
    assert (rnn.bidirectional, rnn.peeky, rnn.reverse_source, rnn.embedding_stddev) == (True, True, True, 0.5)
    assert Seq2SeqOptions(peeky=True).problems() == ["--peeky needs --arch rnn"]
    # What auto precision may pick on a CPU with bfloat16 units: measured per architecture.
    assert Seq2SeqOptions().bfloat16_cpu is True
    assert Seq2SeqOptions(arch="rnn").bfloat16_cpu.startswith("float32: ")
    assert Seq2SeqOptions(arch="rnn", embedding_stddev=0.0).problems() == ["--embedding-stddev must be > 0; got 0.0"]


def test_option_groups_take_each_tasks_defaults(capsys):
    from kseq.training.config import RNNOptions, TrainingOptions

    @opts.task_options(units=256, vocab_size=99)
    class Grouped(RNNOptions, TrainingOptions, opts.TextTaskOptions):
        extra: int = opts.option(3, "an option of the task's own")

    options = opts.parse(Grouped, ["--units", "7"])
    assert (options.units, options.vocab_size, options.extra, options.embed_dim) == (7, 99, 3, 128)
    assert Grouped().units == 256
    with pytest.raises(SystemExit):
        opts.parse(Grouped, ["--help"])
    assert "the RNN's units (default: 256)" in capsys.readouterr().out.replace("\n                        ", " ")
    with pytest.raises(TypeError, match="no inherited option 'unitz'"):
        opts.task_options(unitz=3)(type("Bad", (RNNOptions,), {}))
