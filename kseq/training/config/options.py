"""A task's options as one typed dataclass: the command line, the presets
and the checks all come from its fields.

A field is declared with `option(default, help, ...)`; its annotation gives
the type argparse parses (`int | Auto` takes "auto" or an int, `str | None`
a string or nothing, `bool` a `--name` / `--no-name` pair). Rules on one
option (`choices`, `minimum`, `file`) sit on the field; rules across
options are the class's `problems()`. Everything is checked at parse time,
so a mistyped option, a preset naming an option that does not exist or an
impossible combination stops the run before any work, with a message that
names the option.

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
import dataclasses
import os
import types
import typing

from kseq.errors import CommandParser, UsageError, refuse
from kseq.training.config.config_files import checked_values, read_config
from kseq.training.config.flags import flag
from kseq.training.config.warm_start import adopt_architecture, source_problems
from kseq.training.devices.precision import PRECISIONS
from kseq.training.devices.xla import BLOCKS, JIT_CHOICES

AUTO = "auto"
# The key of a written config file that lists the options the run was given.
GIVEN_KEY = "options_given"
Auto = typing.Literal["auto"]


def option(default, help="", *, choices=None, minimum=None, file=False, files=False):
    """A field of a task's options: its default and `--help` text.

    Args:
        default: the value when neither the command line nor a preset sets it.
        help: one line for `--help`.
        choices: the values allowed (argparse checks them).
        minimum: the smallest value allowed ("auto" and None are let through).
        file: the value is an input file that must exist and be readable.
        files: the value names input files: a path, a glob, or several
            joined by commas (`kseq.data.corpus.corpus_files`), each of
            which must name a readable file.
    """
    metadata = dict(help=help, choices=choices, minimum=minimum, file=file, files=files)
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


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """Options every task takes: the run (seed, devices, folders).

    Option groups subclass it and add theirs; a task's options (declared
    with `task_options`) override the defaults of `logdir` and `export_dir`
    and add rules in `problems()`."""

    seed: int = option(0, "random seed of weights, data order and sampling")
    strategy: str = option("mirrored", "tf.distribute strategy",
                           choices=("default", "mirrored", "multiworker"))
    precision: str = option(AUTO, "dtype policy; auto: the fastest measured on this device class",
                            choices=PRECISIONS)
    jit_compile: str = option(AUTO, "XLA for the train step; auto: where it pays; blocks: the step uncompiled and "
                              "each stack of a Transformer's blocks one XLA function, compiled once whatever the "
                              "depth (for shorter compiles than 'on'; not measured faster than off)",
                              choices=JIT_CHOICES)
    xla_cache: str | None = option(None, "folder of compiled XLA programs (default ~/.cache/kseq/xla)")
    logdir: str = option("runs", "TensorBoard logs, metrics.json, checkpoints and the resumable backup")
    export_dir: str = option("savedmodels", "the SavedModel goes to <export-dir>/<next version>/")
    profile_steps: str | None = option(None, "profile train steps A to B (e.g. 20,30) for TensorBoard's Profile tab")
    init_from: str | None = option(None, "start from the weights and tokenizer of a finished run of this task "
                                   "(its logdir), to continue or fine-tune it")
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
        """Messages for impossible combinations (empty when there is none)."""
        try:
            self.profile_batch
        except ValueError as error:
            return [str(error)]
        if self.jit_compile == BLOCKS and self.without_transformer_blocks:
            expected = "--arch transformer, or " if hasattr(self, "arch") else ""
            return [f"--jit-compile blocks: compiles a TransformerSeq2Seq's blocks, and "
                    f"{self.without_transformer_blocks}: expected {expected}--jit-compile auto, on or off"]
        return source_problems(self)

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
        parts = self.profile_steps.split(",")
        if len(parts) != 2 or not all(part.strip().isdigit() for part in parts) or \
                not 0 < int(parts[0]) <= int(parts[1]):
            raise ValueError(f"--profile-steps must be two steps A,B with 0 < A <= B; got {self.profile_steps!r}")
        return int(parts[0]), int(parts[1])

    def as_hparams(self):
        """Lists every option's value, for TensorBoard's HParams.

        Returns:
            {name: value}.
        """
        return {name: value for name, value in dataclasses.asdict(self).items() if name != "options_given"}


@dataclasses.dataclass(frozen=True)
class TextTaskOptions(TaskOptions):
    """Options of a task that tokenizes text: `--tokenizer PATH`."""

    tokenizer: str | None = option(
        None, "your tokenizer: a SentencePiece model, a WordPiece vocab.txt, or BPE 'vocab.json,merges.txt' "
        "(default: a SentencePiece vocabulary trained on the data)")

    def problems(self):
        """Each path of `--tokenizer` (a file, a folder, or two files joined
        by a comma) must exist and hold a tokenizer kseq reads (checked by
        its content, `kseq.data.tokenizers.check_tokenizer`; it is made
        after TensorFlow starts)."""
        path = self.tokenizer
        if not path:
            return super().problems()
        parts = [path] if os.path.exists(path) or "," not in path else path.split(",", 1)
        missing = [f"--tokenizer {path}: {part}: no such file or folder" for part in parts if not os.path.exists(part)]
        return super().problems() + (missing or _tokenizer_problems(path))


def _tokenizer_problems(path):
    """[the message] when `--tokenizer PATH` holds no tokenizer kseq reads, else []."""
    from kseq.data.tokenizers import check_tokenizer

    try:
        check_tokenizer(path)
    except ValueError as error:
        return [f"--tokenizer {path}: {error}"]
    return []


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
        SystemExit: exit 2, after argparse's usage and error, or after the
            one line of `kseq.errors.refuse` naming the option of a bad
            value, a missing input file, an output folder that cannot be one
            or be written, a preset or config key that names no option, or
            a combination `problems()` refuses.
    """
    doc = doc or options_class.__doc__ or ""
    # One usage line: argparse's own lists every option, 60 lines above a mistyped flag's error.
    parser = CommandParser(
        usage="%(prog)s [-h] [--config FILE] [OPTION ...]",
        description=doc.strip().split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split("\n", 2)[2] if doc.count("\n") > 1 else None,
    )
    fields = _cli_fields(options_class)
    parser.add_argument("--config", metavar="FILE", help="options from a YAML or JSON file (names as the flags', "
                        "- or _); flags given here override it. Every run writes its own to <logdir>/config.yaml")
    if presets:
        parser.add_argument("--preset", choices=list(presets), default=None,
                            help="option values sized for a machine and a budget; the defaults below are "
                            f"{next(iter(presets))!r}'s")
    for title, description, group_fields in _groups(options_class, fields):
        group = parser.add_argument_group(title, description)
        for field in group_fields:
            _add_argument(group, field, options_class)
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
    problems = _field_problems(options, fields) + list(options.problems())
    if problems:
        refuse(parser.prog, problems[0])
    return adopt_architecture(options)


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
    hints = typing.get_type_hints(options_class)
    kinds = {}
    for field in fields:
        kind, can_be_auto = _value_type(hints[field.name])
        kinds[field.name] = (kind, can_be_auto, field.metadata.get("choices"), _can_be_none(hints[field.name]))
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
    kind, can_be_auto = _value_type(typing.get_type_hints(options_class)[field.name])
    help_text = field.metadata.get("help", "")
    if field.default is not None:
        help_text += f" (default: {field.default})"
    if kind is bool:
        parser.add_argument(flag(field.name), action=argparse.BooleanOptionalAction, default=None, help=help_text)
        return
    parser.add_argument(flag(field.name), type=auto_or(kind) if can_be_auto else kind,
                        choices=field.metadata.get("choices"), default=None, help=help_text)


def _can_be_none(annotation):
    """Whether an annotation such as `float | None` takes None (a config file's null)."""
    return type(None) in typing.get_args(annotation)


def _value_type(annotation):
    """(the parsed type, whether "auto" is accepted) of an annotation such
    as `int`, `float | None` or `int | Auto`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        parts = typing.get_args(annotation)
        kinds = [part for part in parts if part not in (type(None), Auto)]
        return (kinds[0] if kinds else str), Auto in parts
    return annotation, False


def _field_problems(options, fields):
    problems = []
    for field in fields:
        value, name = getattr(options, field.name), flag(field.name)
        minimum = field.metadata.get("minimum")
        if minimum is not None and value not in (None, AUTO) and value < minimum:
            can_be_auto = _value_type(typing.get_type_hints(type(options))[field.name])[1]
            problems.append(f"{name} must be {'auto or ' if can_be_auto else ''}>= {minimum}")
        if field.metadata.get("file") and value:
            problems += _file_problems(name, value)
        if field.metadata.get("files") and value:
            from kseq.data.corpus import corpus_files

            try:
                corpus_files(value, name)
            except UsageError as error:
                problems.append(str(error))
    for name in ("logdir", "export_dir", "xla_cache"):
        problems += _folder_problems(flag(name), getattr(options, name), export=name == "export_dir")
    return problems


def _file_problems(option_name, path):
    if os.path.isdir(path):
        return [f"{option_name} {path}: is a directory, not a file"]
    if not os.path.isfile(path):
        return [f"{option_name} {path}: no such file"]
    if not os.access(path, os.R_OK):
        return [f"{option_name} {path}: not readable (permission denied)"]
    return []


def _folder_problems(option_name, path, export):
    """An output folder that exists as something else, lies under a file or
    cannot be written (made) there; for an export, one that is itself a
    SavedModel version (exports go to `<folder>/<next version>/`).

    Checked before the run writes anything: the export is written at the
    end of training, which must not be the moment to learn it cannot be."""
    if not path:
        return []
    if os.path.exists(path) and not os.path.isdir(path):
        return [f"{option_name} {path} exists and is not a directory"]
    parent = os.path.abspath(path)
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent and not os.path.isdir(parent):
        return [f"{option_name} {path}: {parent} is a file, not a directory"]
    problems = _unwritable(option_name, path, parent)
    if not problems and export and os.path.isfile(os.path.join(path, "saved_model.pb")):
        return [f"{option_name} {path} is itself a SavedModel version (it holds saved_model.pb); pass the "
                f"folder that holds the numbered versions, e.g. {os.path.dirname(os.path.normpath(path)) or '.'}"]
    return problems


def _unwritable(option_name, path, existing):
    """[the message] when the folder `path` cannot be written or made, else [].

    Args:
        option_name: the option, for the message.
        path: the folder, as given.
        existing: `path` itself, or its nearest folder that exists.

    Returns:
        A list of at most one message.
    """
    if not os.access(existing, os.W_OK | os.X_OK):  # also refused to root on a read-only file system
        return [f"{option_name} {path}: cannot write in {existing}: expected a folder this user can write in"]
    try:
        longest = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):  # no such limit to ask for here
        return []
    to_make = os.path.relpath(os.path.abspath(path), existing).split(os.sep)
    too_long = [name for name in to_make if name != "." and len(os.fsencode(name)) > longest]
    if too_long:
        return [f"{option_name} {path}: a folder name of {len(os.fsencode(too_long[0]))} bytes cannot be made in "
                f"{existing}: expected names of at most {longest} bytes"]
    return []
