"""A task's options as one typed dataclass: the command line, the presets
and the checks all come from its fields.

A field is declared with `option(default, help, ...)`; its annotation gives
the type argparse parses (`int | Auto` takes "auto" or an int, `str | None`
a string or nothing, `bool` a `--name` / `--no-name` pair). What an option
accepts sits on its field (`choices`, a range, a `check` of its form, the
options it `needs`, the path it names: `kseq.training.config.accepts`,
`kseq.training.config.paths`); other rules across options are the class's
`problems()`. Everything is checked at parse time, before a folder, a
tokenizer or a config file is written and before TensorFlow builds
anything: a mistyped option, a value out of range, a preset naming an
option that does not exist or an impossible combination stops the run with
one line naming the option (and, for a value from `--config FILE`, the file
and the key), exit status 2.

Option groups (`kseq.training.config.model_options`, `training_options`,
`data_options`, `decoding_options`) are dataclasses of fields, one concern
each, whose docstring's first line titles their part of `--help`; a task
declares its options once, with `task_options`, over the groups it takes.

Example:
>>> @task_options()
... class Options(TaskOptions):
...     beams: int | Auto = option(AUTO, "beam size", minimum=1)
>>> parse(Options, ["--beams", "4"]).beams
4
"""

import argparse
import contextlib
import dataclasses
import io
import os
import re

from kseq.errors import CommandParser, UsageError, refuse
from kseq.training.config.accepts import AUTO, Auto, accepted, can_be_none, declared_problems, normalized_needs
from kseq.training.config.accepts import type_hints, value_type
from kseq.training.config.config_files import checked_values, read_config
from kseq.training.config.flags import flag
from kseq.training.config.paths import FOLDER_KINDS, path_problems
from kseq.training.config.warm_start import run_architecture, source_problems
from kseq.training.devices.precision import PRECISIONS
from kseq.training.devices.xla import BLOCKS, JIT_CHOICES

__all__ = ["AUTO", "Auto", "GIVEN_KEY", "TaskOptions", "TextTaskOptions", "auto_or", "config_values", "option",
           "options_parser", "parse", "refusal", "task_options"]

# The key of a written config file that lists the options the run was given.
GIVEN_KEY = "options_given"
# The largest seed keras.utils.set_random_seed takes (numpy's).
MAX_SEED = 2**32 - 1


def option(default, help="", *, choices=None, minimum=None, maximum=None, above=None, below=None, check=None,
           needs=None, when=None, file=False, files=False, folder=None):
    """A field of a task's options: its default, `--help` text and what it accepts.

    Args:
        default: the value when neither the command line nor a preset sets it.
        help: one line for `--help`.
        choices: the values allowed (argparse checks them).
        minimum, maximum: the smallest and largest values allowed;
            `above`, `below`: bounds the value must pass ("auto" and None
            are let through; a float must also be finite).
        check: a function of a value (not None) giving the message that
            refuses it (naming the option), or None.
        needs: {other option: allowed value or values} while this one is
            in use (given, or switched on from a False or None default),
            e.g. `needs={"arch": "rnn"}`.
        when: the values of this option `needs` applies to (default: any
            value in use).
        file: the value is an input file that must exist and be readable.
        files: the value names input files: a path, a glob, or several
            joined by commas (`kseq.data.corpus.corpus_files`), each of
            which must name a readable file.
        folder: the value is a folder: "read" (it must exist and be
            readable), "write" (made and written by the run) or "export"
            (written, holding numbered SavedModel versions).

    Raises:
        ValueError: `folder` is none of those.
    """
    if folder not in (None, *FOLDER_KINDS):
        raise ValueError(f"`folder` must be one of {', '.join(FOLDER_KINDS)}; got {folder!r}")
    metadata = dict(help=help, choices=choices, minimum=minimum, maximum=maximum, above=above, below=below,
                    check=check, needs=normalized_needs(needs), when=when, file=file, files=files, folder=folder)
    return dataclasses.field(default=default, metadata=metadata)


def _task_name(options_class):
    return os.path.basename(options_class.__dataclass_fields__["logdir"].default)


def auto_or(kind):
    """Makes an argparse type taking "auto" or a value of `kind`, e.g. `auto_or(float)`.

    Args:
        kind: the type of a value that is not "auto", such as int or float.

    Returns:
        A function of the text giving AUTO or `kind(text)`.
    """

    def parse_value(text):
        return AUTO if text == AUTO else kind(text)

    parse_value.__name__ = f"auto or {kind.__name__}"  # how argparse names it in errors
    return parse_value


def _profile_steps_problem(text):
    """The message refusing `--profile-steps TEXT`, else None."""
    parts = text.split(",")
    if len(parts) == 2 and all(part.strip().isdigit() for part in parts) and 0 < int(parts[0]) <= int(parts[1]):
        return None
    return f"--profile-steps must be two steps A,B with 0 < A <= B; got {text!r}"


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """Options every task takes: the run (seed, devices, folders).

    Option groups subclass it and add theirs; a task's options (declared
    with `task_options`) override the defaults of `logdir` and `export_dir`
    and add rules in `problems()`."""

    seed: int = option(0, "random seed of weights, data order and sampling", minimum=0, maximum=MAX_SEED)
    strategy: str = option("mirrored", "tf.distribute strategy",
                           choices=("default", "mirrored", "multiworker"))
    precision: str = option(AUTO, "dtype policy; auto: the fastest measured on this device class",
                            choices=PRECISIONS)
    jit_compile: str = option(AUTO, "XLA for the train step; auto: where it pays; blocks: the step uncompiled and "
                              "each stack of a Transformer's blocks one XLA function, compiled once whatever the "
                              "depth (for shorter compiles than 'on'; not measured faster than off)",
                              choices=JIT_CHOICES)
    xla_cache: str | None = option(None, "folder of compiled XLA programs (default ~/.cache/kseq/xla)",
                                   folder="write")
    logdir: str = option("runs", "TensorBoard logs, metrics.json, checkpoints and the resumable backup",
                         folder="write")
    export_dir: str = option("savedmodels", "the SavedModel goes to <export-dir>/<next version>/", folder="export")
    profile_steps: str | None = option(None, "profile train steps A to B (e.g. 20,30) for TensorBoard's Profile tab",
                                       check=_profile_steps_problem)
    init_from: str | None = option(None, "start from the weights and tokenizer of a finished run of this task "
                                   "(its logdir), to continue or fine-tune it", folder="read")
    accumulate: int = option(1, "batches whose mean gradient makes one update (gradient accumulation)", minimum=1)
    # Set by `parse`: the preset applied and the options the command line gave.
    preset: str | None = None
    options_given: tuple = ()

    # The options that shape the weights (each option group adds its own):
    # `--init-from` takes them from the run it starts from.
    ARCHITECTURE = ()

    @property
    def without_transformer_blocks(self):
        """Why the model these options build has no Transformer blocks for
        `--jit-compile blocks` to compile, or None where it has them (a task
        that builds a TransformerSeq2Seq says when)."""
        return "this task's model has none"

    def problems(self):
        """Messages for values the options' declarations refuse and for
        impossible combinations (empty when there is none); option groups
        add theirs. The paths and the `--init-from` run are checked by
        `parse`, which reads them."""
        problems = declared_problems(self)
        if self.jit_compile == BLOCKS and self.without_transformer_blocks:
            expected = "--arch transformer, or " if hasattr(self, "arch") else ""
            problems.append(f"--jit-compile blocks: compiles a TransformerSeq2Seq's blocks, and "
                            f"{self.without_transformer_blocks}: expected {expected}--jit-compile auto, on or off")
        return problems

    @classmethod
    def architecture(cls):
        """The names in `ARCHITECTURE` of this class and every base."""
        names = (name for base in reversed(cls.__mro__) for name in base.__dict__.get("ARCHITECTURE", ()))
        return tuple(dict.fromkeys(names))

    @property
    def task_name(self):
        """The task's name: each logs under runs/<its name> by default."""
        return _task_name(type(self))

    @property
    def profile_batch(self):
        """Gives `--profile-steps` as keras' TensorBoard `profile_batch`: (A, B), or 0 for none.

        Raises:
            ValueError: `--profile-steps` is not A,B with 0 < A <= B.
        """
        if not self.profile_steps:
            return 0
        problem = _profile_steps_problem(self.profile_steps)
        if problem:
            raise ValueError(problem)
        first, last = self.profile_steps.split(",")
        return int(first), int(last)

    def as_hparams(self):
        """Lists every option's value, for TensorBoard's HParams.

        Returns:
            {name: value}.
        """
        return {name: value for name, value in dataclasses.asdict(self).items() if name != "options_given"}


def _tokenizer_problem(path):
    """The message when `--tokenizer PATH` names no tokenizer kseq reads, else None.

    Each path (a file, a folder, or two files joined by a comma) must exist
    and hold a tokenizer kseq reads (checked by its content,
    `kseq.data.tokenizers.check_tokenizer`; it is made after TensorFlow
    starts)."""
    from kseq.data.tokenizers import check_tokenizer

    parts = [path] if os.path.exists(path) or "," not in path else path.split(",", 1)
    missing = [part for part in parts if not os.path.exists(part)]
    if missing:
        return f"--tokenizer {path}: {missing[0]}: no such file or folder"
    try:
        check_tokenizer(path)
    except ValueError as error:
        return f"--tokenizer {path}: {error}"
    return None


@dataclasses.dataclass(frozen=True)
class TextTaskOptions(TaskOptions):
    """Options of a task that tokenizes text: `--tokenizer PATH`."""

    tokenizer: str | None = option(
        None, "your tokenizer: a SentencePiece model, a WordPiece vocab.txt, or BPE 'vocab.json,merges.txt' "
        "(default: a SentencePiece vocabulary trained on the data)", check=_tokenizer_problem)


def task_options(name=None, **defaults):
    """Class decorator, the one way a task declares its options: a frozen
    dataclass whose inherited options (from option groups such as
    `RNNOptions`) take these `defaults`; a name that is no inherited option
    is a TypeError at import.

    Args:
        name: the task's name: it logs to `runs/<name>` and exports to
            `savedmodels/<name>` by default.
        **defaults: {inherited option: the task's default}.

    Returns:
        The decorator.

    Example:
    >>> @task_options("seeded", seed=7)
    ... class Seeded(TaskOptions):
    ...     pass
    >>> Seeded().seed, Seeded().logdir
    (7, 'runs/seeded')
    """
    if name:
        defaults = {"logdir": f"runs/{name}", "export_dir": f"savedmodels/{name}", **defaults}

    def decorate(cls):
        inherited = {}
        for base in reversed(cls.__mro__[1:]):
            inherited.update(base.__dict__.get("__dataclass_fields__", {}))
        for name, value in defaults.items():
            if name not in inherited:
                raise TypeError(f"{cls.__name__}: no inherited option {name!r} to give a default")
            cls.__annotations__ = {**cls.__dict__.get("__annotations__", {}), name: inherited[name].type}
            setattr(cls, name, dataclasses.field(default=value, metadata=inherited[name].metadata))
        return dataclasses.dataclass(frozen=True)(cls)

    return decorate


def options_parser(options_class, doc=None, presets=None):
    """Makes a task's `parse_args(argv=None)`: `parse` of `options_class`.

    Args:
        options_class: the task's options dataclass (`task_options`).
        doc: the task's docstring, `--help`'s text; None (default): the
            class's docstring.
        presets: {preset name: {option: value}}, the first the defaults';
            None (default) for no `--preset`.

    Returns:
        `parse_args(argv=None)`, giving the checked options.
    """

    def parse_args(argv=None):
        """The task's options from `argv` (default: the command line), checked."""
        return parse(options_class, argv, doc=doc, presets=presets)

    return parse_args


class OptionsParser(CommandParser):
    """A task's argparse parser: a value a flag does not take (`--epochs
    abc`, `--arch cnn`, `--no-tied=1`) is refused in one line, as every
    other refused value, with what the flag accepts; a flag that does not
    exist keeps argparse's usage line and the closest options.

    Attributes:
        accepted: {flag: what it accepts, in words}.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.accepted = {}

    def error(self, message):
        if message.startswith("argument "):
            refuse(self.prog, message + self._expected(message))
        super().error(message)

    def _expected(self, message):
        """": expected <what the flag accepts>" for a value of the wrong
        type (argparse names the choices itself), else ""."""
        match = re.match(r"argument ([^:/ ]+)", message)
        what = self.accepted.get(match.group(1)) if match else None
        if what and ("invalid" in message and "choice" not in message or "explicit argument" in message):
            return f": expected {what}"
        return ""


def parse(options_class, argv=None, doc=None, presets=None):
    """Parses a task's options from the command line, a config file and presets.

    Values come from the defaults, then `--preset`'s values (the flag's,
    else the config file's), then `--config FILE`'s, then the command line,
    then an `--init-from` run's architecture.

    Args:
        options_class: the task's options dataclass.
        argv: the command line; None (default) reads `sys.argv`.
        doc: `--help`'s text; None (default): the class's docstring.
        presets: {preset name: {option: value}}; None (default) for none.

    Returns:
        An `options_class` instance.

    Raises:
        SystemExit: exit 2, after argparse's usage and error for a flag
            that does not exist, or after the one line of
            `kseq.errors.refuse` naming the option of a bad value (and the
            file and key of a `--config` value), a missing input file, an
            output folder that cannot be one or be written, a preset or
            config key that names no option, an `--init-from` run that
            cannot fit, or a combination the declarations or `problems()`
            refuse.
    """
    parser = _parser(options_class, doc, presets)
    fields = _cli_fields(options_class)
    args = parser.parse_args(argv)
    given = {name: value for name, value in vars(args).items()
             if value is not None and name not in ("preset", "config")}
    config = _config_values(parser, args.config, options_class, fields, presets) if args.config else {}
    written_given = config.pop(GIVEN_KEY, None)
    values = {}
    if presets:
        preset = args.preset or config.pop("preset", None) or next(iter(presets))
        unknown = sorted(set(presets[preset]) - {field.name for field in fields})
        if unknown:
            refuse(parser.prog, f"preset {preset!r} names no option: {', '.join(unknown)}")
        values.update(presets[preset], preset=preset)
    # A file a run wrote says which of its values were given; every value of a user's file is.
    config_given = set(config) if written_given is None else set(written_given)
    options = options_class(**{**values, **config, **given}, options_given=tuple(sorted(config_given | set(given))))
    from_config = {name: value for name, value in config.items() if name not in given}
    problems = _path_problems(options, fields) or source_problems(options)
    # The checks see the --init-from run's architecture, what will be built, as the run's: not as options given
    # (an RNN's option given is one that needs --arch rnn), though a config file that run wrote lists them.
    adopted = {} if problems else run_architecture(options)
    checked = dataclasses.replace(options, **adopted, options_given=tuple(
        name for name in options.options_given if name not in adopted))
    problems = problems or list(checked.problems())
    if problems:
        refuse(parser.prog, _with_origin(problems[0], from_config, args.config))
    # The adopted options count as given: no "auto" resizes them.
    return dataclasses.replace(checked, options_given=tuple(sorted({*options.options_given, *adopted})))


def refusal(options_class, argv, presets=None):
    """What `parse` refuses `argv` with, without printing it: to check the
    options one task passes to another (generate_reviews to classify).

    Args:
        options_class: the other task's options dataclass.
        argv: its command line, a list of strings.
        presets: its presets, as `parse` takes them.

    Returns:
        The refusal's last line after "error: ", or None when `argv` parses.
    """
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed), contextlib.redirect_stdout(io.StringIO()):
            parse(options_class, argv, presets=presets)
    except SystemExit as stop:
        lines = printed.getvalue().strip().splitlines() or [f"it exits with status {stop.code}"]
        return lines[-1].split(": error: ", 1)[-1]
    return None


def _parser(options_class, doc, presets):
    """The argparse parser of `options_class`'s options, grouped as `--help` shows them."""
    doc = doc or options_class.__doc__ or ""
    # One usage line: argparse's own lists every option, 60 lines above a mistyped flag's error.
    parser = OptionsParser(
        usage="%(prog)s [-h] [--config FILE] [OPTION ...]",
        description=doc.strip().split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split("\n", 2)[2] if doc.count("\n") > 1 else None,
    )
    parser.add_argument("--config", metavar="FILE", help="options from a YAML or JSON file (names as the flags', "
                        "- or _); flags given here override it. Every run writes its own to <logdir>/config.yaml")
    if presets:
        parser.add_argument("--preset", choices=list(presets), default=None,
                            help="option values sized for a machine and a budget; the defaults below are "
                            f"{next(iter(presets))!r}'s")
    fields = _cli_fields(options_class)
    for title, description, group_fields in _groups(options_class, fields):
        group = parser.add_argument_group(title, description)
        for field in group_fields:
            parser.accepted[flag(field.name)] = _add_argument(group, field, options_class)
    return parser


def _with_origin(message, from_config, path):
    """`message`, naming the `--config` file and its keys whose values the message is about."""
    named = [name for name in from_config if re.search(rf"{re.escape(flag(name))}(?![\w-])", message)]
    if not named:
        return message
    keys = ", ".join(f"{name.replace('_', '-')}: {_spelled_value(from_config[name])}" for name in named)
    return f"{message} (from --config {path}: {keys})"


def _spelled_value(value):
    """A value as a YAML file spells it."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)


def config_values(options):
    """Lists the values `--config` reads back to run `options` again.

    Args:
        options: the task's options.

    Returns:
        {name: value} of every option a command line can set, the preset,
        and under `GIVEN_KEY` the options given (the others took their
        default, which an "auto" choice may change).
    """
    values = {"preset": options.preset} if options.preset else {}
    values |= {field.name: getattr(options, field.name) for field in _cli_fields(type(options))}
    return values | {GIVEN_KEY: sorted(options.options_given)}


def _config_values(parser, path, options_class, fields, presets):
    """`--config`'s values, checked as the flags would be (`refuse` on a bad one)."""
    hints = type_hints(options_class)
    kinds = {}
    for field in fields:
        kind, can_be_auto = value_type(hints[field.name])
        kinds[field.name] = (kind, can_be_auto, field.metadata.get("choices"), can_be_none(hints[field.name]))
    if presets:
        kinds["preset"] = (str, False, list(presets), False)
    kinds[GIVEN_KEY] = (list, False, list(kinds), False)
    try:
        return checked_values(read_config(path), kinds, path)
    except UsageError as error:
        refuse(parser.prog, error)


def _cli_fields(options_class):
    """The fields declared with `option` (others, such as `preset`, are set by `parse` or the task)."""
    return [field for field in dataclasses.fields(options_class) if "help" in field.metadata]


def _groups(options_class, fields):
    """[(title, description, fields)] of `--help`: the task's own options
    first, then each option group's, in the order the class inherits them,
    the run's (`TaskOptions`) last. A field belongs to the first class that
    declares it (a task's new default does not move it)."""
    owner = {}
    for cls in reversed(options_class.__mro__):
        for name in cls.__dict__.get("__annotations__", {}):
            owner.setdefault(name, cls)
    classes = [options_class] + [cls for cls in options_class.__mro__[1:] if cls is not TaskOptions] + [TaskOptions]
    groups = []
    for cls in classes:
        mine = [field for field in fields if owner.get(field.name) is cls]
        if not mine:
            continue
        if cls is options_class:
            title, description = f"{_task_name(options_class)} options", None
        else:
            # A group's title: its docstring's first line, up to a colon.
            first = (cls.__dict__.get("__doc__") or cls.__name__).strip().split("\n")[0]
            title, description = first.split(":")[0].rstrip("."), None
        groups.append((title, description, mine))
    return groups


def _add_argument(parser, field, options_class):
    """Adds `field`'s flag to `parser`; returns what the flag accepts, in words."""
    kind, can_be_auto = value_type(type_hints(options_class)[field.name])
    help_text = field.metadata.get("help", "")
    if field.default is not None:
        help_text += f" (default: {field.default})"
    name = flag(field.name)
    if kind is bool:
        parser.add_argument(name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        return f"{name} or --no-{name[2:]}, without a value"
    parser.add_argument(name, type=auto_or(kind) if can_be_auto else kind,
                        choices=field.metadata.get("choices"), default=None, help=help_text)
    return accepted(kind, field.metadata, can_be_auto)


def _path_problems(options, fields):
    """Messages for the paths the options name (`kseq.training.config.paths`), in the fields' order."""
    problems = []
    for field in fields:
        problems += path_problems(flag(field.name), getattr(options, field.name), field.metadata)
    return problems
