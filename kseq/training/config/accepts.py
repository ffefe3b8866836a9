"""What an option accepts, declared beside it with `option(...)`, and the
messages naming it when a value is refused.

- A range: `minimum` / `maximum` (inclusive), `above` / `below` (exclusive).
  A float is also finite, with a range or without.
- `choices`: the values allowed.
- `check`: a function of a value (never None) giving the message that
  refuses it, or None; for values of a form (`--eval-every 5m`) or that
  only a library can judge (`--backbone`).
- `needs`: {other option: allowed value(s)} that must hold while the
  option is in use (given, or switched on from a False or None default),
  or, with `when`, while it holds one of the values `when` lists; a
  requirement on an option the task lacks does not apply.

A range or choice is checked on values other than the option's default
(a task's default is its declaration's own, and the tests check every
task's defaults once). Paths are checked apart, when the command line is
parsed (`kseq.training.config.paths`).
"""

import dataclasses
import functools
import math
import types
import typing

from kseq.training.config.flags import flag

AUTO = "auto"
Auto = typing.Literal["auto"]
KIND_NAMES = {int: "a whole number", float: "a number", str: "a string"}


@functools.cache
def type_hints(options_class):
    """`typing.get_type_hints` of an options class, read once (a class's fields do not change)."""
    return typing.get_type_hints(options_class)


def value_type(annotation):
    """(the parsed type, whether "auto" is accepted) of an annotation such
    as `int`, `float | None` or `int | Auto`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        parts = typing.get_args(annotation)
        kinds = [part for part in parts if part not in (type(None), Auto)]
        return (kinds[0] if kinds else str), Auto in parts
    return annotation, False


def can_be_none(annotation):
    """Whether an annotation such as `float | None` takes None (a config file's null)."""
    return type(None) in typing.get_args(annotation)


def _bounds(metadata):
    """((low, low excluded), (high, high excluded)) of a field's range; None for a side without a bound."""
    low = (metadata["above"], True) if metadata.get("above") is not None else (metadata.get("minimum"), False)
    high = (metadata["below"], True) if metadata.get("below") is not None else (metadata.get("maximum"), False)
    return (low if low[0] is not None else None), (high if high[0] is not None else None)


def range_text(metadata):
    """The range a field declares, as a message says it: ">= 1", "in [0, 1)", "> 0"; "" for none."""
    low, high = _bounds(metadata)
    if low and high:
        return f"in {'(' if low[1] else '['}{low[0]}, {high[0]}{')' if high[1] else ']'}"
    if low:
        return f"{'>' if low[1] else '>='} {low[0]}"
    if high:
        return f"{'<' if high[1] else '<='} {high[0]}"
    return ""


def accepted(kind, metadata, can_be_auto=False):
    """What an option takes, in words: "a whole number >= 1", "auto or a number in [0, 1)".

    Args:
        kind: the parsed type (int, float, str, bool).
        metadata: the field's `option` metadata.
        can_be_auto: whether "auto" is accepted too.

    Returns:
        The phrase.
    """
    if kind is bool:
        return "true or false"
    if metadata.get("choices"):
        return "one of " + ", ".join(map(str, metadata["choices"]))
    text = " ".join(part for part in (KIND_NAMES.get(kind, "a value"), range_text(metadata)) if part)
    return f"auto or {text}" if can_be_auto else text


def _outside(metadata, value):
    low, high = _bounds(metadata)
    if isinstance(value, float) and not math.isfinite(value):
        return True
    too_low = low and not (value > low[0] if low[1] else value >= low[0])
    too_high = high and not (value < high[0] if high[1] else value <= high[0])
    return bool(too_low or too_high)


def value_problem(field, value, can_be_auto):
    """The message refusing `value` for `field` by its range or choices, else None.

    Args:
        field: the dataclass field, declared with `option`.
        value: its value; None and "auto" (where taken) pass.
        can_be_auto: whether the field takes "auto".

    Returns:
        "--name must be ...; got VALUE" or None.
    """
    if value is None or (can_be_auto and value == AUTO) or isinstance(value, bool) or value == field.default:
        return None
    name, metadata = flag(field.name), field.metadata
    choices = metadata.get("choices")
    if choices and value not in choices:
        return f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}"
    if isinstance(value, (int, float)) and _outside(metadata, value):
        shown = range_text(metadata) or "a finite number"
        return f"{name} must be {'auto or ' if can_be_auto else ''}{shown}; got {value}"
    return None


def in_use(options, field):
    """Whether the option takes part in this run: given, or switched on from a False or None default."""
    value = getattr(options, field.name)
    return field.name in options.options_given or (field.default in (False, None) and value not in (False, None))


def _either(values):
    values = [str(value) for value in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def needs_problem(options, field):
    """The message when `field`'s `needs` do not hold, else None.

    Args:
        options: the task's options.
        field: a field declared with `option(..., needs=...)`.

    Returns:
        "--name needs --other value" (the value too with `when`), or None.
    """
    needs, when = field.metadata.get("needs"), field.metadata.get("when")
    value = getattr(options, field.name)
    applies = value in when if when is not None else in_use(options, field)
    present = {other: allowed for other, allowed in (needs or {}).items() if hasattr(options, other)}
    if not applies or all(getattr(options, other) in allowed for other, allowed in present.items()):
        return None
    requirements = " and ".join(f"{flag(other)} {_either(allowed)}" for other, allowed in present.items())
    return f"{flag(field.name)}{f' {value}' if when is not None else ''} needs {requirements}"


def declared_problems(options):
    """Messages for every declared rule `options` breaks: ranges, choices, checks and needs.

    Args:
        options: a task's options (a dataclass instance).

    Returns:
        A list of messages, in the fields' order.
    """
    hints = type_hints(type(options))
    problems = []
    for field in dataclasses.fields(options):
        if "help" not in field.metadata:
            continue
        value = getattr(options, field.name)
        check = field.metadata.get("check")
        found = [value_problem(field, value, value_type(hints[field.name])[1]),
                 check(value) if check and value is not None else None,
                 needs_problem(options, field) if field.metadata.get("needs") else None]
        problems += [message for message in found if message]
    return problems


def normalized_needs(needs):
    """{option: tuple of allowed values} from `needs` whose values may be single."""
    if not needs:
        return None
    return {name: (allowed,) if isinstance(allowed, (str, bool, int, float)) else tuple(allowed)
            for name, allowed in needs.items()}
