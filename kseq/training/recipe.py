"""The flow every task in kseq.tasks shares, so that each holds only its task.

A recipe declares its options (a dataclass, kseq.training.config.options) and
runs: `start` (strategy, precision, seed and logdir, in the order TensorFlow
needs), `compile_model` (under the strategy, clipping the gradient summed
over replicas), its own training (`kseq.training.loop.fit` or
`cadenced_fit`, each resumable after a kill) and evaluation, `write_metrics` (atomic
metrics.json with what ran, `Run.decisions` among it) and `serve_sample`
(the export, loaded back and called). A user's TSV reading and the run's tokenizer (`--tokenizer PATH`,
or a SentencePiece vocabulary trained on the data) live here too.
"""

import os
import time

import keras
import tensorflow as tf

from kseq._atomic import write_bytes_atomic, write_json_atomic
from kseq._compat import accumulate_after_all_reduce
from kseq.training.config.config_files import write_config
from kseq.training.config.options import config_values
from kseq.training.config.warm_start import describe as describe_init
from kseq.training.config.warm_start import (
    init_tokenizer,
    init_weights,
    keep_trained,  # noqa: F401 (the recipes' call)
)
from kseq.training.devices.distribution import (
    clip_after_all_reduce,
    is_chief,
    make_strategy,
    task,
)
from kseq.training.devices.precision import describe_precision, resolve_precision
from kseq.training.devices.xla import enable_persistent_cache, jit_decision
from kseq.training.reporting.tensorboard import write_scores


class Run:
    """What `start` sets up: `strategy`, `chief` (whether this process
    writes logs and exports), `workdir` (the logdir, or this worker's
    folder under it), `precision` and `xla_cache` (None without XLA)."""

    def __init__(self, options, xla, bfloat16_cpu=False):
        self.started = time.monotonic()
        # TensorFlow reads XLA's flags when it sets up its devices: first.
        self.xla_cache = enable_persistent_cache(options.xla_cache) if xla else None
        # Then a multi-worker strategy sets up collectives before other TensorFlow work.
        self.strategy = make_strategy(options.strategy)
        self.chief = is_chief(self.strategy)
        task_type, task_id = task(self.strategy)
        print(f"strategy: {type(self.strategy).__name__} with {self.strategy.num_replicas_in_sync} "
              "replica(s)" + ("" if self.chief else f"; this is {task_type} {task_id}: logs and "
                              "exports are the chief's"))
        self.precision = resolve_precision(options.precision, bfloat16_cpu=bfloat16_cpu)
        print(describe_precision(self.precision))
        if options.init_from:
            print(describe_init(options))
        keras.utils.set_random_seed(options.seed)
        # Other workers keep their own files, as on separate disks.
        logdir = options.logdir
        self.workdir = logdir if self.chief else os.path.join(logdir, "workers", f"{task_type}-{task_id}")
        os.makedirs(self.workdir, exist_ok=True)
        if self.chief:
            write_config(config_values(options), logdir)

    @property
    def seconds(self):
        return time.monotonic() - self.started

    def decisions(self, model, xla):
        """The run's auto choices as they ran, as `Decision`s: the precision,
        and XLA for `model` (`xla`: the `JitDecision` it was compiled with)."""
        return [self.precision.as_decision(), jit_decision(model, xla)]


def start(options, xla=False, bfloat16_cpu=False):
    """Sets up a run (see `Run`); call it before any other TensorFlow work.
    `xla`: whether the run compiles anything with XLA (then compiled
    programs are kept in the persistent cache). `bfloat16_cpu`: what was
    measured of the recipe's model under mixed_bfloat16 on a CPU with
    bfloat16 units, where "auto" precision picks it only for True
    (`kseq.training.devices.precision.resolve_precision`)."""
    return Run(options, xla, bfloat16_cpu)


def compile_model(model, optimizer, loss, metrics=(), jit_compile=False, accumulate=1, init_from=None):
    """Compiles `model` (built under the run's strategy scope); the replicas'
    summed gradient is clipped, as on one device (`clip_after_all_reduce`).
    `accumulate` > 1: the optimizer updates once every `accumulate` batches
    with their mean gradient (`accumulate_after_all_reduce`; its
    `iterations` counts updates). `init_from`: a finished run's logdir
    whose weights the model starts from (`kseq.training.config.warm_start`)."""
    if accumulate > 1:
        optimizer = accumulate_after_all_reduce(optimizer, accumulate)
    else:
        optimizer = clip_after_all_reduce(optimizer)
    model.compile(optimizer=optimizer, loss=loss, metrics=list(metrics), jit_compile=jit_compile)
    if init_from:
        init_weights(model, init_from)
    return model


def write_metrics(logdir, metrics, scores=()):
    """`<logdir>/metrics.json`, written whole or not at all. The entries
    named in `scores` (e.g. "test_bleu") are also logged as scalars of run
    `<logdir>/test` (without their "test_"), at the step training reached:
    TensorBoard's HParams dashboard lists them beside the run's settings."""
    write_json_atomic(os.path.join(logdir, "metrics.json"), metrics)
    if scores:
        values = {name.removeprefix("test_"): metrics[name] for name in scores}
        write_scores(logdir, "test", values, step=metrics.get("steps", 0))
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


def tokenizer_for(options, texts, vocab_size, folder=None):
    """The run's tokenizer: `--tokenizer PATH` read by
    `kseq.data.tokenizers.load_tokenizer` (a saved kseq tokenizer, a
    SentencePiece model, a WordPiece vocab.txt, a BPE "vocab.json,merges.txt"
    pair), or a SentencePiece vocabulary of `vocab_size` pieces trained on
    `texts`; with `--init-from`, that run's. Its files (`tokenizer_files`)
    are written to `folder` (default: the logdir), where `load_tokenizer`
    reads them back (a resumed run).
    A path that holds no tokenizer exits with a message naming it."""
    from kseq.data.subword_tokenizer import SubwordTokenizer
    from kseq.data.tokenizers import load_tokenizer

    path = options.tokenizer
    if options.init_from:
        tokenizer = init_tokenizer(options.init_from)
        print(f"tokenizer: --init-from {options.init_from}'s, {tokenizer.vocab_size} ids")
    elif path:
        try:
            tokenizer = load_tokenizer(path)
        except ValueError as error:
            raise SystemExit(f"--tokenizer {path}: {error}") from None
        print(f"tokenizer: {path}, {type(tokenizer).__name__} of {tokenizer.vocab_size} ids "
              "(--vocab-size unused)")
    else:
        try:
            tokenizer = SubwordTokenizer.train(texts, vocab_size)
        except ValueError as error:
            raise SystemExit(f"--vocab-size {vocab_size}: {error}") from None
        print(f"SentencePiece vocabulary: {tokenizer.vocab_size} pieces")
    for name, content in tokenizer_files(tokenizer).items():
        write_bytes_atomic(os.path.join(folder or options.logdir, name), content)
    return tokenizer


def resumable_tokenizer(options, texts, workdir, resuming, cache=None):
    """The run's tokenizer: the one a resumed run saved in `workdir`, else
    `tokenizer_for` with `options.vocab_size` ("auto": sized to `texts` by
    `kseq.data.subword_tokenizer.vocab_size_for`, at most
    `options.max_vocab_size`). `cache`: a folder of the data's own (the
    corpus scan's) where a SentencePiece vocabulary trained on `texts` is
    kept, and found by the next run on the same data."""
    from kseq.data.subword_tokenizer import SubwordTokenizer, vocab_size_for
    from kseq.data.tokenizers import load_tokenizer

    start = time.time()
    saved = [path for path in (os.path.join(workdir, name) for name in ("spm.model", "tokenizer.json"))
             if os.path.exists(path)]
    own = not options.tokenizer and not options.init_from
    if resuming and saved:
        tokenizer = load_tokenizer(saved[0])
    else:
        size = options.vocab_size
        if size == "auto" and own:
            size = vocab_size_for(texts, options.max_vocab_size)
        kept = os.path.join(cache, f"spm-{size}.model") if cache and own else None
        if kept and os.path.isfile(kept):
            tokenizer = SubwordTokenizer.load(kept)
            print(f"SentencePiece vocabulary: {tokenizer.vocab_size} pieces, trained on this data before ({kept})")
            for name, content in tokenizer_files(tokenizer).items():
                write_bytes_atomic(os.path.join(workdir, name), content)
        else:
            tokenizer = tokenizer_for(options, texts, size, folder=workdir)
            if kept:
                tokenizer.save(kept)
    most = f", at most {options.max_vocab_size}" if hasattr(options, "max_vocab_size") else ""
    print(f"vocabulary: {tokenizer.vocab_size} ids ({time.time() - start:.0f} s; --vocab-size {options.vocab_size}{most})")
    return tokenizer


def tokenizer_files(tokenizer):
    """{file name: bytes} that rebuild `tokenizer` with `load_tokenizer`
    (spm.model for a SubwordTokenizer, tokenizer.json for others): for the
    logdir and an export's assets/ folder."""
    if hasattr(tokenizer, "asset_files"):
        return tokenizer.asset_files()
    return {}


def read_tsv_reporting(files, role):
    """Two-column TSV lines as two lists, from `files` (a path, a glob or
    several joined by commas, plain or gzip: `kseq.data.corpus.corpus_files`);
    bad lines are skipped and reported by file and number."""
    from kseq.data.corpus import corpus_files
    from kseq.data.tsv import format_problems, read_tsv

    first, second = [], []
    for path in corpus_files(files, f"--{role}-tsv"):
        sources, targets, problems = read_tsv(path)
        if problems:
            print(f"{role}: {format_problems(problems, path, total_lines=len(sources) + len(problems))}")
        first += sources
        second += targets
    return first, second

