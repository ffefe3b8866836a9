"""The flow every script in recipes/ shares, so that each holds only its task.

A recipe declares its defaults (a dict, with presets if it has them) and
runs: `parse_config` (one typed option per default, the shared checks),
`start` (strategy, precision, seed and logdir, in the order TensorFlow
needs), `compile_model` (under the strategy, clipping the gradient summed
over replicas), its own training and evaluation, `write_metrics` (atomic
metrics.json with what ran) and `serve_sample` (the export, loaded back and
called). Argument checks, a user's TSV reading and the run's tokenizer
(`--tokenizer PATH`, or a SentencePiece vocabulary trained on the data) live
here too.
"""

import argparse
import os
import time

import keras
import tensorflow as tf

from kseq._atomic import write_bytes_atomic, write_json_atomic
from kseq.training.distribution import clip_after_all_reduce, is_chief, make_strategy, task
from kseq.training.precision import PRECISIONS, describe_precision, resolve_precision
from kseq.training.xla import JIT_CHOICES, enable_persistent_cache

# Options every recipe takes, and their defaults.
COMMON = dict(seed=0, strategy="mirrored", precision="auto", jit_compile="auto", xla_cache=None)
CHOICES = dict(strategy=("default", "mirrored", "multiworker"), precision=PRECISIONS,
               jit_compile=JIT_CHOICES)
# `--tokenizer PATH`, for recipes that tokenize text (see `tokenizer_for`).
TOKENIZER = dict(tokenizer=None)


def auto_or(kind):
    """An option type: "auto", or a value of `kind` (e.g. `auto_or(float)`)."""

    def parse(text):
        return "auto" if text == "auto" else kind(text)

    parse.__name__ = f"auto or {kind.__name__}"  # how argparse names it in errors
    return parse


def parse_config(doc, defaults, argv=None, presets=None, choices=None, types=None, positive=(),
                 files=(), check=None, extra=None):
    """The recipe's configuration: its defaults, overridden by the command line.

    Args:
        doc: the recipe's docstring (the first line describes it; the rest
            is the help's epilog).
        defaults: {name: default} of every option (`COMMON` included by the
            recipe); each becomes `--name-with-dashes`, typed by its default
            (booleans as `--name` / `--no-name`), or by `types` where the
            default is None.
        presets: {preset: defaults} chosen with `--preset` (the first is the
            default), applied over `defaults`.
        choices: {name: allowed values}.
        positive: names that must be >= 1.
        files: names of input files that must exist and be readable.
        check: `config -> error message or None`, for rules across options.
        extra: `parser -> None`, to add options that are no config value.

    Returns:
        The config dict, with "options_given": the names set on the command
        line (a recipe may choose what the user left open); `parser.error`
        (exit 2, usage) on bad values.
    """
    parser = argparse.ArgumentParser(
        description=doc.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split("\n", 2)[2] if doc.count("\n") > 1 else None,
    )
    choices = {**CHOICES, **(choices or {})}
    types = types or {}
    names = dict(defaults)
    if presets:
        parser.add_argument("--preset", choices=sorted(presets), default=next(iter(presets)))
        for preset in presets.values():
            names.update({name: value for name, value in preset.items() if names.get(name) is None})
    for name, default in names.items():
        flag = "--" + name.replace("_", "-")
        kind = types.get(name) or (type(default) if default is not None else str)
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        elif kind in (list, dict, tuple):
            continue
        else:
            parser.add_argument(flag, type=kind, choices=choices.get(name), default=None)
    if extra:
        extra(parser)
    args = parser.parse_args(argv)
    config = dict(defaults)
    if presets:
        config.update(presets[args.preset], preset=args.preset)
    given = {name: value for name, value in vars(args).items() if value is not None}
    config.update(given, options_given=tuple(sorted(name for name in given if name in names)))
    for name in positive:
        if config[name] is not None and config[name] < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    problem = check(config) if check else None
    if problem:
        parser.error(problem)
    check_paths(parser, config, files=files)
    check_tokenizer_path(parser, config.get("tokenizer"))
    return config


class Run:
    """What `start` sets up: `strategy`, `chief` (whether this process
    writes logs and exports), `workdir` (the logdir, or this worker's
    folder under it), `precision` and `xla_cache` (None without XLA)."""

    def __init__(self, config, xla, bfloat16_cpu=False):
        self.started = time.monotonic()
        # TensorFlow reads XLA's flags when it sets up its devices: first.
        self.xla_cache = enable_persistent_cache(_value(config, "xla_cache")) if xla else None
        # Then a multi-worker strategy sets up collectives before other TensorFlow work.
        self.strategy = make_strategy(_value(config, "strategy"))
        self.chief = is_chief(self.strategy)
        task_type, task_id = task(self.strategy)
        print(f"strategy: {type(self.strategy).__name__} with {self.strategy.num_replicas_in_sync} "
              "replica(s)" + ("" if self.chief else f"; this is {task_type} {task_id}: logs and "
                              "exports are the chief's"))
        self.precision = resolve_precision(_value(config, "precision"), bfloat16_cpu=bfloat16_cpu)
        print(describe_precision(self.precision))
        keras.utils.set_random_seed(_value(config, "seed"))
        # Other workers keep their own files, as on separate disks.
        logdir = _value(config, "logdir")
        self.workdir = logdir if self.chief else os.path.join(logdir, "workers", f"{task_type}-{task_id}")
        os.makedirs(self.workdir, exist_ok=True)

    @property
    def seconds(self):
        return time.monotonic() - self.started


def start(config, xla=False, bfloat16_cpu=False):
    """Sets up a run (see `Run`); call it before any other TensorFlow work.
    `xla`: whether the run compiles anything with XLA (then compiled
    programs are kept in the persistent cache). `bfloat16_cpu`: whether the
    recipe's models were measured to train well under mixed_bfloat16 on a
    CPU with bfloat16 units, where "auto" precision then picks it."""
    return Run(config, xla, bfloat16_cpu)


def compile_model(model, optimizer, loss, metrics=(), jit_compile=False):
    """Compiles `model` (built under the run's strategy scope); the replicas'
    summed gradient is clipped, as on one device (`clip_after_all_reduce`)."""
    model.compile(optimizer=clip_after_all_reduce(optimizer), loss=loss, metrics=list(metrics),
                  jit_compile=jit_compile)
    return model


def write_metrics(logdir, metrics):
    """`<logdir>/metrics.json`, written whole or not at all."""
    write_json_atomic(os.path.join(logdir, "metrics.json"), metrics)
    return metrics


def serve_sample(path, inputs):
    """Loads the export at `path` as TF Serving would and calls its
    `serving_default` on `inputs` ({input name: strings}); prints and
    returns the outputs as Python values."""
    served = tf.saved_model.load(path).signatures["serving_default"]
    outputs = {name: value.numpy() for name, value in served(
        **{name: tf.constant(values) for name, values in inputs.items()}).items()}
    shown = {name: [v.decode() if isinstance(v, bytes) else v for v in value.tolist()][:1]
             for name, value in outputs.items() if name != "token_ids"}
    print(f"exported {path}: {next(iter(inputs.values()))[0]!r} -> {shown}")
    return outputs


def check_paths(parser, config, files, folders=("logdir", "export_dir"), exports=("export_dir",)):
    """`parser.error` (exit 2 with usage) before any work, naming the option:

    - `files`: an input file that is missing, a directory or unreadable;
    - `folders`: an output folder path that exists as something else, or
      lies under a file;
    - `exports`: an export folder that is itself a SavedModel version (it
      holds `saved_model.pb`): exports go to `<folder>/<next version>/`,
      so the folder to pass is the one that holds the numbered versions.
    """
    for name in files:
        path = config.get(name)
        if not path:
            continue
        option = _option(name)
        if os.path.isdir(path):
            parser.error(f"{option} {path}: is a directory, not a file")
        if not os.path.isfile(path):
            parser.error(f"{option} {path}: no such file")
        if not os.access(path, os.R_OK):
            parser.error(f"{option} {path}: not readable (permission denied)")
    for name in folders:
        path = config.get(name)
        if not path:
            continue
        option = _option(name)
        if os.path.exists(path) and not os.path.isdir(path):
            parser.error(f"{option} {path} exists and is not a directory")
        blocker = _file_above(path)
        if blocker:
            parser.error(f"{option} {path}: {blocker} is a file, not a directory")
        if name in exports and os.path.isfile(os.path.join(path, "saved_model.pb")):
            parser.error(
                f"{option} {path} is itself a SavedModel version (it holds saved_model.pb); "
                f"pass the folder that holds the numbered versions, e.g. "
                f"{os.path.dirname(os.path.normpath(path)) or '.'}"
            )


def check_tokenizer_path(parser, path):
    """`parser.error` unless each path of `--tokenizer` (a file, a folder,
    or two files joined by a comma) exists; what it holds is read later,
    after `start` (TensorFlow's devices come first)."""
    if not path:
        return
    parts = [path] if os.path.exists(path) or "," not in path else path.split(",", 1)
    for part in parts:
        if not os.path.exists(part):
            parser.error(f"--tokenizer {path}: {part}: no such file or folder")


def tokenizer_for(config, texts, vocab_size, folder=None):
    """The run's tokenizer: `--tokenizer PATH` read by
    `kseq.data.tokenizers.load_tokenizer` (a saved kseq tokenizer, a
    SentencePiece model, a WordPiece vocab.txt, a BPE "vocab.json,merges.txt"
    pair), or a SentencePiece vocabulary of `vocab_size` pieces trained on
    `texts`. Its files (`tokenizer_files`) are written to `folder` (default:
    the logdir), where `load_tokenizer` reads them back (a resumed run).
    A path that holds no tokenizer exits with a message naming it."""
    from kseq.data.subword_tokenizer import SubwordTokenizer
    from kseq.data.tokenizers import load_tokenizer

    path = _value(config, "tokenizer")
    if path:
        try:
            tokenizer = load_tokenizer(path)
        except ValueError as error:
            raise SystemExit(f"--tokenizer {path}: {error}") from None
        print(f"tokenizer: {path}, {type(tokenizer).__name__} of {tokenizer.vocab_size} ids "
              "(--vocab-size unused)")
    else:
        tokenizer = SubwordTokenizer.train(texts, vocab_size)
        print(f"SentencePiece vocabulary: {tokenizer.vocab_size} pieces")
    for name, content in tokenizer_files(tokenizer).items():
        write_bytes_atomic(os.path.join(folder or _value(config, "logdir"), name), content)
    return tokenizer


def resumable_tokenizer(options, texts, workdir, resuming):
    """The run's tokenizer: the one a resumed run saved in `workdir`, else
    `tokenizer_for` with `options.vocab_size` ("auto": sized to `texts` by
    `kseq.data.subword_tokenizer.vocab_size_for`, at most
    `options.max_vocab_size`)."""
    from kseq.data.subword_tokenizer import vocab_size_for
    from kseq.data.tokenizers import load_tokenizer

    start = time.time()
    saved = [path for path in (os.path.join(workdir, name) for name in ("spm.model", "tokenizer.json"))
             if os.path.exists(path)]
    if resuming and saved:
        tokenizer = load_tokenizer(saved[0])
    else:
        size = options.vocab_size
        if size == "auto" and not options.tokenizer:
            size = vocab_size_for(texts, options.max_vocab_size)
        tokenizer = tokenizer_for(options, texts, size, folder=workdir)
    print(f"vocabulary: {tokenizer.vocab_size} ids ({time.time() - start:.0f} s; "
          f"--vocab-size {options.vocab_size}, at most {options.max_vocab_size})")
    return tokenizer


def tokenizer_files(tokenizer):
    """{file name: bytes} that rebuild `tokenizer` with `load_tokenizer`
    (spm.model for a SubwordTokenizer, tokenizer.json for others): for the
    logdir and an export's assets/ folder."""
    if hasattr(tokenizer, "asset_files"):
        return tokenizer.asset_files()
    return {}


def _value(options, name):
    """An option of a recipe's options (a dataclass; a dict while recipes move to one)."""
    return options.get(name) if isinstance(options, dict) else getattr(options, name, None)


def _option(name):
    return f"--{name.replace('_', '-')}"


def _file_above(path):
    """The nearest existing ancestor of `path` if it is not a directory."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return parent if parent and not os.path.isdir(parent) else None


def read_tsv_reporting(path, role):
    """A two-column TSV as two lists; bad lines are skipped and reported."""
    from kseq.data.tsv import format_problems, read_tsv

    first, second, problems = read_tsv(path)
    if problems:
        print(f"{role}: {format_problems(problems, path, total_lines=len(first) + len(problems))}")
    return first, second


def hold_out(*columns, every):
    """Parallel lists split into (kept, held out), each a tuple of lists:
    every `every`-th item, from the first, is held out (a validation set
    when none is given)."""
    held = tuple(column[::every] for column in columns)
    kept = tuple([x for i, x in enumerate(column) if i % every] for column in columns)
    return kept, held


def read_splits(config, kind, read, every):
    """{"train", "valid", "test"} of a user's files: `--train-<kind>`, then
    `--valid-<kind>` or every `every`-th training item held out, then
    `--test-<kind>` or the valid split. `read(path, role)` returns a tuple
    of parallel lists (e.g. sources and targets)."""
    splits = {"train": read(_value(config, f"train_{kind}"), "train")}
    if _value(config, f"valid_{kind}"):
        splits["valid"] = read(_value(config, f"valid_{kind}"), "valid")
    else:
        splits["train"], splits["valid"] = hold_out(*splits["train"], every=every)
    test = _value(config, f"test_{kind}")
    splits["test"] = read(test, "test") if test else splits["valid"]
    return splits
