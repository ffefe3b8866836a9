"""`--config FILE` (kseq.training.config.config_files through options.parse): a
YAML or JSON file holds any option, flags override it, a wrong key or value
fails at parse time naming it, and the config a run writes runs it again."""

import json
import re

import pytest

from kseq.training.config import options as opts
from kseq.training.config.config_files import CONFIG_FILE, write_config
from test_options import Options, parse_error

PRESETS = {"small": {}, "big": dict(layers=6, rate=0.5)}


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_yaml_file_holds_options_and_flags_override_it(tmp_path):
    path = write(tmp_path / "run.yaml", "layers: 4\nbeams: 3\nkind: b\nrate: 1\ntied: false\n")
    options = opts.parse(Options, ["--config", path, "--beams", "5"], presets=PRESETS)
    assert (options.layers, options.beams, options.kind, options.rate, options.tied) == (4, 5, "b", 1.0, False)
    assert isinstance(options.rate, float)
    assert options.options_given == ("beams", "kind", "layers", "rate", "tied"), "a user's keys count as given"


def test_json_works_too_and_the_file_may_choose_the_preset(tmp_path):
    path = write(tmp_path / "run.json", json.dumps({"preset": "big", "beams": "auto"}))
    options = opts.parse(Options, ["--config", path], presets=PRESETS)
    assert (options.preset, options.layers, options.rate, options.beams) == ("big", 6, 0.5, "auto")
    assert opts.parse(Options, ["--config", path, "--preset", "small"], presets=PRESETS).layers == 2, \
        "the flag's preset wins"


@pytest.mark.parametrize("text, message", [
    ("layres: 3\n", "--config .*: 'layres' is no option of this task; did you mean 'layers'?"),
    ("layers: three\n", "--config .*: layers must be a whole number; got 'three'"),
    ("layers: 2.5\n", "--config .*: layers must be a whole number; got 2.5"),
    ("tied: 1\n", "--config .*: tied must be true or false; got 1"),
    ("kind: c\n", "--config .*: kind must be one of a, b; got 'c'"),
    ("layers: 0\n", "--layers must be >= 1"),
    ("- layers\n", "--config .*: must hold a mapping of option names to values; got a list"),
    ("layers: [1\n", r"--config .*: not YAML or JSON \(line 2, column 1\)"),
    ("preset: huge\n", "--config .*: preset must be one of small, big; got 'huge'"),
    ("prompts: [a]\n", "--config .*: 'prompts' is no option of this task"),
    ("layers: null\n", "--config .*: layers needs a value"),
])
def test_a_wrong_key_or_value_fails_at_parse_time_naming_it(capsys, tmp_path, text, message):
    error = parse_error(capsys, ["--config", write(tmp_path / "bad.yaml", text)], presets=PRESETS)
    assert re.search(message, error), error


def test_null_is_taken_where_the_option_may_be_none(tmp_path):
    from kseq.tasks import translate

    # What the runs before --beam-patience 1 became the default wrote.
    path = write(tmp_path / "older.yaml", "beam_patience: null\nmax_minutes: null\n")
    options = translate.parse_args(["--config", path])
    assert (options.beam_patience, options.max_minutes) == (None, None), "the exact rule; no time limit"
    assert translate.parse_args([]).beam_patience == 1.0


def test_a_missing_config_file_says_so(capsys, tmp_path):
    assert "--config " + str(tmp_path / "none.yaml") + ": No such file" in parse_error(
        capsys, ["--config", str(tmp_path / "none.yaml")])


def test_the_config_a_run_writes_runs_it_again(tmp_path):
    first = opts.parse(Options, ["--preset", "big", "--layers", "2", "--beams", "4", "--logdir", str(tmp_path)],
                       presets=PRESETS)
    write_config(opts.config_values(first), str(tmp_path))
    text = (tmp_path / CONFIG_FILE).read_text()
    assert "rate: 0.5" in text and "options_given:" in text
    again = opts.parse(Options, ["--config", str(tmp_path / CONFIG_FILE)], presets=PRESETS)
    assert again == first, "the same values, preset and options given: auto choices decide alike"
