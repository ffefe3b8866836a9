"""Task options in a file: `--config FILE` (YAML or JSON) holds any option
by its name, the flags given beside it override it, and every run writes
the options it ran with to `<logdir>/config.yaml`, which `--config` reads
back to run it again. `kseq.training.config.options.parse` does the reading; this
module knows files and values, not tasks."""

import difflib
import os

import yaml

from kseq._atomic import write_bytes_atomic
from kseq.errors import UsageError

CONFIG_FILE = "config.yaml"


def read_config(path):
    """Reads a YAML (or JSON, a subset of YAML) file holding one mapping of option names.

    Args:
        path: the file; its names may use "-" or "_".

    Returns:
        {name with "_": value}; {} for an empty file.

    Raises:
        UsageError: the file cannot be read, is not YAML, or holds no mapping
            (a ValueError).
    """
    try:
        with open(path, encoding="utf-8") as f:
            loaded = yaml.safe_load(f)
    except OSError as error:
        raise UsageError(f"--config {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        raise UsageError(f"--config {path}: not YAML or JSON{at}: {getattr(error, 'problem', error)}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UsageError(f"--config {path}: must hold a mapping of option names to values; got a "
                         f"{type(loaded).__name__}")
    return {str(key).replace("-", "_"): value for key, value in loaded.items()}


def checked_values(config, kinds, path):
    """Checks a config file's values and converts them as the options take them.

    Args:
        config: {name: value} from `read_config`.
        kinds: {option name: (type, accepts "auto", choices or None, accepts None)}.
        path: the file, for messages.

    Returns:
        {name: value}, floats made float and other strings str.

    Raises:
        UsageError: a name that is no option (with the nearest one) or a
            value of the wrong type or not among the choices (a ValueError).
    """
    values = {}
    for name, value in config.items():
        if name not in kinds:
            near = difflib.get_close_matches(name, list(kinds), n=1)
            hint = f"; did you mean {near[0].replace('_', '-')!r}?" if near else ""
            raise UsageError(f"--config {path}: {name.replace('_', '-')!r} is no option of this task{hint}")
        values[name] = _value(name, value, *kinds[name], path)
    return values


def _value(name, value, kind, can_be_auto, choices, can_be_none, path):
    spelled = f"--config {path}: {name.replace('_', '-')}"
    if value is None:
        if not can_be_none:
            raise UsageError(f"{spelled} needs a value")
        return None
    if can_be_auto and value == "auto":
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise UsageError(f"{spelled} must be true or false; got {value!r}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{spelled} must be a whole number{' or auto' if can_be_auto else ''}; got {value!r}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"{spelled} must be a number; got {value!r}")
        value = float(value)
    elif kind is str:
        if isinstance(value, (bool, list, dict)):
            raise UsageError(f"{spelled} must be a string; got {value!r}")
        value = str(value)  # e.g. `eval_every: 500`
    elif kind is list:  # names, each among the choices
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise UsageError(f"{spelled} must be a list of option names; got {value!r}")
        wrong = [item for item in value if choices and item not in choices]
        if wrong:
            raise UsageError(f"{spelled} names no option {wrong[0]!r}")
        return value
    if choices and value not in choices:
        raise UsageError(f"{spelled} must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value


def write_config(values, folder):
    """Writes option values to `<folder>/config.yaml` (atomically), in order.

    Args:
        values: {name: value}, as `config_values` gives them.
        folder: the run's folder, made if missing.
    """
    os.makedirs(folder, exist_ok=True)
    text = "# The options this run ran with: `--config` this file to run it again.\n"
    text += yaml.safe_dump(values, sort_keys=False, allow_unicode=True, default_flow_style=False)
    write_bytes_atomic(os.path.join(folder, CONFIG_FILE), text.encode("utf-8"))

