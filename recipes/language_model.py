"""Train an RNN language model with truncated BPTT; export prompt -> continuation.

Default data: the English side (World English Bible) of kseq's Bible verse
pairs, with the translation recipe's fixed split by verse key; verses are
SentencePiece-tokenized (a vocabulary trained on the training verses), each
followed by EOS, and joined into one stream per split. The training stream is
cut into `--batch-size` parallel streams read `--bptt` tokens at a time.

Two models with the same configuration and the same budget (`--epochs`, and
`--max-minutes` of training each) are trained: the truncated-BPTT one (state carried across batches, reset every
epoch) and a baseline that starts every batch from a zero state (independent
chunks). Both are scored on the test stream (each in its own regime) and
written to `<logdir>/metrics.json` as `test_perplexity` and
`baseline_test_perplexity`. The BPTT model is exported with a seeded top-k
sampler: `prompt` (string) -> `continuation` (string).

About 12 minutes on 2 CPU cores (two models of about 5 minutes each).

    python recipes/language_model.py
    python recipes/language_model.py --train-txt my.txt --valid-txt my_valid.txt
    tensorboard --logdir runs/language_model

--precision and --jit-compile as in recipes/translate.py; --tokenizer PATH
as in recipes/classify.py (your vocabulary instead of a trained one).
"""

import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import kseq  # noqa: E402
from kseq.data.streams import join_documents, stream_batches  # noqa: E402
from kseq.data.text import normalize_text  # noqa: E402
from kseq.decoding import Sampler  # noqa: E402
from kseq.export import export_language_model  # noqa: E402
from kseq.training import recipe  # noqa: E402
from kseq.training.callbacks import GenerationMonitor, TimeLimit  # noqa: E402
from kseq.training.runtime import tune_cpu_runtime  # noqa: E402
from kseq.training.tensorboard import write_hparams  # noqa: E402
from kseq.training.xla import decide_jit_compile  # noqa: E402

DEFAULTS = dict(
    recipe.COMMON, **recipe.TOKENIZER, train_txt=None, valid_txt=None, test_txt=None,
    cell="lstm", num_layers=1, embed_dim=256, units=256, dropout=0.3, tie_weights=True,
    vocab_size=4000, batch_size=32, bptt=35, epochs=3, learning_rate=2e-3, clipnorm=1.0,
    max_minutes=5.0, sample_length=40, temperature=0.8, top_k=40,
    logdir="runs/language_model", export_dir="savedmodels/language_model",
    prompts=["In the beginning", "The Lord said to Moses,", "Blessed are"],
)


def parse_args(argv=None):
    def check(config):
        if config["tie_weights"] and config["embed_dim"] != config["units"]:
            return "tied weights need --embed-dim == --units (or pass --no-tie-weights)"
        return None

    return recipe.parse_config(
        __doc__, DEFAULTS, argv, choices=dict(cell=("rnn", "lstm", "gru")), check=check,
        positive=("vocab_size", "batch_size", "bptt", "epochs", "units", "embed_dim"),
        files=("train_txt", "valid_txt", "test_txt"),
    )


def read_lines(path):
    """Non-empty normalized lines of a UTF-8 text file."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [normalize_text(line) for line in f]
    except UnicodeDecodeError as error:
        raise SystemExit(f"{path}: not UTF-8 text ({error})")
    lines = [line for line in lines if line]
    if not lines:
        raise SystemExit(f"{path}: no text")
    return lines


def load_texts(config):
    """{split: [documents]} from the text files or the default corpus."""
    if config.get("train_txt"):
        splits = recipe.read_splits(config, "txt", lambda path, role: (read_lines(path),), every=50)
        texts = {split: lines for split, (lines,) in splits.items()}
    else:
        from kseq.data.bible import load_bible_pairs

        texts = {split: load_bible_pairs(split)[0] for split in ("train", "valid", "test")}
    for split, documents in texts.items():
        print(f"{split}: {len(documents)} documents")
    return texts


def build_model(config, vocab_size, carry_state, precision="float32"):
    model = kseq.models.RNNLanguageModel(
        vocab_size, embed_dim=config["embed_dim"], units=config["units"], cell=config["cell"],
        num_layers=config["num_layers"], dropout=config["dropout"],
        tie_weights=config["tie_weights"], carry_state=carry_state, dtype=precision,
    )
    model.build()
    jit = decide_jit_compile(config["jit_compile"], num_shapes=1, budget_minutes=config["max_minutes"])
    return recipe.compile_model(
        model, kseq.optimizers.FusedAdam(config["learning_rate"], global_clipnorm=config["clipnorm"]),
        kseq.losses.MaskedSparseCategoricalCrossentropy(), [kseq.metrics.Perplexity()],
        jit_compile=jit.use,
    )


def make_continuer(model, tokenizer, config):
    search = Sampler(config["sample_length"], temperature=config["temperature"],
                     top_k=config["top_k"], seed=config["seed"])

    def continue_texts(prompts):
        ids = tokenizer.tokenize(list(prompts)).to_tensor()
        generated, _ = model.search(tf.cast(ids, tf.int32), search)
        return [t.decode("utf-8") for t in tokenizer.detokenize(generated).numpy()]

    return continue_texts, search


def train_one(name, config, streams, tokenizer, run, carry_state):
    """Trains one model; returns (model, its metrics)."""
    logdir = os.path.join(config["logdir"], name)
    with run.strategy.scope():
        model = build_model(config, tokenizer.vocab_size, carry_state, run.precision.policy)
    print(f"{name}: {model.count_params():,} parameters, carry_state={carry_state}")
    continuer, _ = make_continuer(model, tokenizer, config)
    callbacks = [
        TimeLimit(config["max_minutes"]),
        GenerationMonitor(config["prompts"], None, continuer, {}, logdir=logdir),
        keras.callbacks.TensorBoard(logdir),
        keras.callbacks.ModelCheckpoint(os.path.join(logdir, "checkpoints", "best.weights.h5"),
                                        save_weights_only=True, save_best_only=True),
    ]
    start = time.time()
    history = model.fit(streams["train"], validation_data=streams["valid"],
                        epochs=config["epochs"], callbacks=callbacks, verbose=1, shuffle=False)
    seconds = time.time() - start
    model.load_weights(os.path.join(logdir, "checkpoints", "best.weights.h5"))
    model.save(os.path.join(logdir, "model.keras"))
    test = model.evaluate(streams["test"], verbose=0, return_dict=True)
    print(f"{name}: test perplexity {test['perplexity']:.2f}")
    return model, {
        "test_perplexity": round(float(test["perplexity"]), 3),
        "valid_loss": float(min(history.history["val_loss"])),
        "valid_perplexity": float(min(history.history["val_perplexity"])),
        "train_seconds": round(seconds, 1),
        "epochs_run": len(history.history["loss"]),
        "steps": int(model.optimizer.iterations.numpy()),
    }


def main(argv=None):
    config = parse_args(argv)
    # Each replica gets the same rows of every batch: its own streams.
    xla = decide_jit_compile(config["jit_compile"], num_shapes=1, budget_minutes=config["max_minutes"])
    run = recipe.start(config, xla=xla.use)
    texts = load_texts(config)
    tokenizer = recipe.tokenizer_for(config, texts["train"], config["vocab_size"])
    streams = {}
    for split, documents in texts.items():
        tokens = join_documents(tokenizer.tokenize(documents))
        # Evaluation streams are fewer so that little text is cut off.
        batch = config["batch_size"] if split == "train" else min(config["batch_size"], 8)
        streams[split] = stream_batches(tokens, batch, config["bptt"], drop_remainder=split == "train")
        print(f"{split}: {len(tokens):,} tokens in {batch} streams")
    write_hparams(config["logdir"], {k: v for k, v in config.items() if k != "prompts"} | run.precision.as_dict())

    model, metrics = train_one("tbptt", config, streams, tokenizer, run, carry_state=True)
    _, baseline = train_one("independent_chunks", config, streams, tokenizer, run, carry_state=False)
    continuer, search = make_continuer(model, tokenizer, config)
    samples = [{"prompt": p, "continuation": c}
               for p, c in zip(config["prompts"], continuer(config["prompts"]))]
    for sample in samples:
        print(f"  {sample['prompt']!r} -> {sample['continuation']!r}")
    results = recipe.write_metrics(config["logdir"], {
        **metrics,
        "baseline_test_perplexity": baseline["test_perplexity"],
        "baseline_valid_loss": baseline["valid_loss"],
        "baseline_train_seconds": baseline["train_seconds"],
        "baseline_steps": baseline["steps"],
        "test_cross_entropy": round(math.log(metrics["test_perplexity"]), 4),
        "samples": samples,
        "wall_seconds": round(run.seconds, 1),
        **run.precision.as_dict(),
    })
    path = export_language_model(model, tokenizer, config["export_dir"], search,
                                 assets=recipe.tokenizer_files(tokenizer))
    recipe.serve_sample(path, {"prompt": config["prompts"][:1]})
    print(f"test perplexity {metrics['test_perplexity']:.2f} with truncated BPTT, "
          f"{baseline['test_perplexity']:.2f} with independent chunks")
    print(f"TensorBoard: tensorboard --logdir {config['logdir']}")
    return results


if __name__ == "__main__":
    tune_cpu_runtime()
    main()
