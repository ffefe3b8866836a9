"""`--init-from DIR`: a run that starts from a finished run's weights and
tokenizer, to continue training it or to fine-tune it on other data.

Every task ends its training with `keep_trained`: the weights it tests
and exports, and its options, written atomically into its logdir. A new
run given that logdir takes from it the options that shape the weights
(the task's `ARCHITECTURE`), its tokenizer (so ids mean the same pieces)
and its weights; the optimizer, the schedule and the data are the new
run's own. What cannot fit stops the run before training, naming the
option: another task's run, a run that did not finish, an architecture
option given that differs from the run's, a tokenizer given besides.
"""

import dataclasses
import json
import os

from kseq._atomic import write_json_atomic
from kseq.errors import UsageError
from kseq.training.config.flags import flag
from kseq.training.config.paths import readable_folder_problems

TRAINED_WEIGHTS = "trained.weights.h5"
OPTIONS_FILE = "options.json"


def keep_trained(options, model):
    """Writes what `--init-from <logdir>` reads: the model's weights and the run's options.

    They go to `<logdir>/trained.weights.h5` (atomically) and
    `<logdir>/options.json` (the options as the run ran).

    Args:
        options: the task's options; `options.logdir` is the folder.
        model: the trained model.
    """
    folder = options.logdir
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".trained-{os.getpid()}.weights.h5")  # keras wants this suffix
    model.save_weights(temporary, overwrite=True)
    os.replace(temporary, os.path.join(folder, TRAINED_WEIGHTS))
    # "recipe": the key's name from before tasks were called tasks, kept so
    # that runs of every version read alike.
    write_json_atomic(os.path.join(folder, OPTIONS_FILE),
                      {"recipe": options.task_name, **options.as_hparams()})


def source_problems(options):
    """Checks the `--init-from` folder against the task and the other options.

    Args:
        options: the task's options.

    Returns:
        Messages (empty when none) for a folder that holds no finished run
        of this task, or clashes with other options.
    """
    folder = options.init_from
    if not folder:
        return []
    name = flag("init_from")
    unreadable = readable_folder_problems(name, folder)
    if unreadable:
        return unreadable
    missing = [file for file in (OPTIONS_FILE, TRAINED_WEIGHTS) if not os.path.isfile(os.path.join(folder, file))]
    if missing:
        return [f"{name} {folder}: no finished run there (no {' or '.join(missing)}; a task writes them "
                "when its training ends)"]
    try:
        saved = _read_options(folder)
    except (OSError, ValueError) as error:
        return [f"{name} {folder}: its {OPTIONS_FILE} cannot be read ({getattr(error, 'strerror', None) or error}): "
                f"expected the {OPTIONS_FILE} a task writes when its training ends"]
    if saved.get("recipe") != options.task_name:
        return [f"{name} {folder}: a run of recipe {saved.get('recipe')!r}, not {options.task_name!r}"]
    problems = []
    if getattr(options, "tokenizer", None):
        problems.append(f"{name} takes the run's tokenizer (its ids are the weights' vocabulary); drop --tokenizer")
    for option in options.architecture():
        if option in options.options_given and getattr(options, option) != saved.get(option):
            problems.append(f"{flag(option)} {getattr(options, option)} differs from the {name} run's "
                            f"{saved.get(option)}: its weights need the same architecture")
    return problems


def run_architecture(options):
    """The `--init-from` run's architecture options, as it ran.

    Args:
        options: the task's options, whose `--init-from` passed `source_problems`.

    Returns:
        {option: the run's value}; {} without `--init-from`.
    """
    if not options.init_from:
        return {}
    saved = _read_options(options.init_from)
    return {name: saved[name] for name in options.architecture() if name in saved}


def describe(options):
    """Writes the line a run prints about where its weights start.

    Args:
        options: the task's options, with `--init-from`.

    Returns:
        The line, naming the architecture options adopted.
    """
    adopted = ", ".join(_spelled(name, getattr(options, name)) for name in options.architecture())
    return f"init from {options.init_from}: its weights and tokenizer; {adopted}"


def init_tokenizer(folder):
    """Loads the tokenizer an `--init-from` run saved in `folder`.

    Args:
        folder: the run's logdir.

    Returns:
        The tokenizer (from spm.model or tokenizer.json).

    Raises:
        UsageError: the folder holds neither.
    """
    from kseq.data.tokenizers import load_tokenizer

    for name in ("spm.model", "tokenizer.json"):
        if os.path.exists(os.path.join(folder, name)):
            return load_tokenizer(os.path.join(folder, name))
    raise UsageError(f"{flag('init_from')} {folder}: no tokenizer there: expected spm.model or tokenizer.json, "
                     "which a task writes in its logdir")


def init_weights(model, folder):
    """Loads the `--init-from` run's weights into `model`, leaving its optimizer as it is.

    A new run's schedule so starts at step 0. The model is built first if it is not.

    Args:
        model: the model, compiled or not.
        folder: the run's logdir.

    Raises:
        UsageError: the weights do not fit the model.
    """
    if not model.built:
        model.build()  # kseq's models build without an input shape
    optimizer = getattr(model, "optimizer", None)
    model.optimizer = None  # the file also holds that run's optimizer state
    try:
        model.load_weights(os.path.join(folder, TRAINED_WEIGHTS))
    except ValueError as error:
        detail = next((line for line in str(error).splitlines() if "shape" in line), str(error).splitlines()[0])
        raise UsageError(f"{flag('init_from')} {folder}: its weights do not fit this model ({detail})") from None
    finally:
        model.optimizer = optimizer
    print(f"weights from {os.path.join(folder, TRAINED_WEIGHTS)}")


def finished_run(folder, options_class):
    """Reads a finished run's options and tokenizer, to rebuild its model.

    Args:
        folder: the run's logdir, where `keep_trained` wrote.
        options_class: the task's options class.

    Returns:
        (options, tokenizer).

    Raises:
        UsageError: the folder holds no finished run of this task (a ValueError).
    """
    missing = [name for name in (OPTIONS_FILE, TRAINED_WEIGHTS) if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise UsageError(f"{folder} holds no finished {options_class().task_name} run (no {' or '.join(missing)}; "
                         "a run writes them when its training ends).")
    saved = _read_options(folder)
    name = options_class().task_name
    if saved.get("recipe") != name:
        raise UsageError(f"{folder} holds a run of recipe {saved.get('recipe')!r}, not {name!r}.")
    options = options_class(**{field.name: saved[field.name] for field in dataclasses.fields(options_class)
                               if field.name in saved})
    return options, init_tokenizer(folder)


def _spelled(name, value):
    """An option as the command line spells it."""
    if isinstance(value, bool):
        return flag(name) if value else flag(name).replace("--", "--no-", 1)
    return f"{flag(name)} {value}"


def _read_options(folder):
    with open(os.path.join(folder, OPTIONS_FILE), encoding="utf-8") as f:
        return json.load(f)
