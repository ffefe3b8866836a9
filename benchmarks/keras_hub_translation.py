"""Reference run: KerasHub's translation example model on kseq's Bible split.

What this is: the baseline that `recipes/translate.py` is compared against in
the README. It rebuilds the model of the keras-io "English-to-Spanish
translation with KerasHub" example, trained here English -> French on the
same data split (kseq.data.bible) for the same wall-clock budget:

- separate WordPiece vocabularies (at most 15,000 tokens each, cased,
  accents kept), computed on the training text of each language;
- every sequence padded/truncated to a fixed 96 tokens (the target to 97:
  [START] + tokens + [END]), batches of 64, shuffled;
- 1 `keras_hub.layers.TransformerEncoder` + 1 `TransformerDecoder`, embedding
  dim 256, feed-forward (intermediate) dim 2048, 8 heads, learned positions
  (`TokenAndPositionEmbedding`, `mask_zero=True`), dropout 0.5 before a softmax
  `Dense` over the French vocabulary; `rmsprop`, cross-entropy that ignores
  padding, accuracy metric;
- greedy decoding with `keras_hub.samplers.GreedySampler`, re-running the
  whole decoder on the prompt at every step (no key/value cache).

Test-set sacreBLEU and chrF (kseq.training.scoring.evaluation.translation_scores), training
time, steps, parameters, decoding time and three sample translations are
printed and written as JSON to --output.

Time on an idle 2-core CPU: about 70 s for the vocabularies, the training
budget (--max-minutes, 12 by default) ending
with one validation pass, then about 4 minutes to decode the 624 test
sentences: about 18 minutes in all. Run it on an otherwise idle machine (the
JSON records the load average during training and decoding):

    .venv/bin/python benchmarks/keras_hub_translation.py --max-minutes 12

Smoke test (under a minute of training and decoding):

    .venv/bin/python benchmarks/keras_hub_translation.py --max-minutes 0.3 \\
        --max-test-sentences 16 --output runs/keras_hub_smoke/metrics.json
"""

import argparse
import json
import math
import os
import re
import sys
import time
import warnings

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kseq.data.bible import load_bible_pairs  # noqa: E402
from kseq.training.scoring.evaluation import translation_scores  # noqa: E402
from kseq.training.devices.runtime import tune_cpu_runtime  # noqa: E402
from load_sampler import LoadSampler  # noqa: E402

# Sub-layers inside KerasHub's layers (position embedding, attention
# projections) warn that they drop the Keras mask; the KerasHub layers pass
# padding masks on themselves, so the warnings are noise here.
warnings.filterwarnings("ignore", message=".*does not support masking.*")

# Hyper-parameters of the keras-io example, except MAX_LENGTH (the example
# uses 40 for short sentence pairs; Bible verses are longer, and kseq's quick
# preset caps sequences at 96 tokens too).
MAX_LENGTH = 96
BATCH_SIZE = 64
# Per language, as asked of compute_word_piece_vocabulary. On this corpus
# (about 800k words a side) the learner stops short of it, since it only
# considers candidates seen at least 10 times (TensorFlow Text's default
# lower_thresh, which the KerasHub function does not expose): it yields
# about 4,600 English and 6,000 French tokens. The JSON reports the sizes.
VOCAB_SIZE = 15000
EMBED_DIM = 256
INTERMEDIATE_DIM = 2048
NUM_HEADS = 8
RESERVED_TOKENS = ["[PAD]", "[UNK]", "[START]", "[END]"]  # [PAD] gets id 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--max-minutes", type=float, default=12.0,
                        help="wall-clock training budget in minutes (default 12)")
    parser.add_argument("--epochs", type=int, default=30,
                        help="upper bound on epochs; the time budget normally stops first")
    parser.add_argument("--max-test-sentences", type=int, default=None,
                        help="score only the first N test sentences (smoke tests)")
    parser.add_argument("--decode-batch-size", type=int, default=64)
    parser.add_argument("--output", default="runs/keras_hub_reference/metrics.json")
    return parser.parse_args(argv)


class WallClockBudget(keras.callbacks.Callback):
    """Sets `model.stop_training` after the first batch that ends past the
    budget; Keras then finishes the epoch with its validation pass."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = 60.0 * minutes
        self.stopped_at_step = None

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self.stopped_at_step is None and time.monotonic() - self.start > self.seconds:
            self.stopped_at_step = int(self.model.optimizer.iterations.numpy())
            print(f"\nwall-clock budget reached at step {self.stopped_at_step}", flush=True)
        if self.stopped_at_step is not None:
            self.model.stop_training = True


def make_tokenizer(texts):
    """A cased WordPiece tokenizer whose vocabulary is learned on `texts`."""
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        tf.data.Dataset.from_tensor_slices(texts).batch(1000).prefetch(2),
        vocabulary_size=VOCAB_SIZE,
        lowercase=False,
        strip_accents=False,
        reserved_tokens=RESERVED_TOKENS,
    )
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary, lowercase=False, strip_accents=False, oov_token="[UNK]"
    )


def pad_rows(rows, length):
    """Pads (with [PAD] = 0) or truncates lists of ids to a (N, length) array."""
    array = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        row = row[:length]
        array[i, : len(row)] = row
    return array


def encode_pairs(english, french, en_tokenizer, fr_tokenizer):
    """Token ids: (sources (N, 96), decoder inputs (N, 96), labels (N, 96)),
    every row padded (or truncated) to the fixed length, plus how many
    sources and targets were truncated. The target is [START] + tokens +
    [END] in 97 positions; a long target keeps its [END] (like
    keras_hub.layers.StartEndPacker, which the example uses)."""
    start_id, end_id = fr_tokenizer.token_to_id("[START]"), fr_tokenizer.token_to_id("[END]")
    # In eager mode KerasHub tokenizers return Python lists of ids.
    en_ids, fr_ids = en_tokenizer(tf.constant(english)), fr_tokenizer(tf.constant(french))
    long_sources = sum(len(row) > MAX_LENGTH for row in en_ids)
    long_targets = sum(len(row) > MAX_LENGTH - 1 for row in fr_ids)
    sources = pad_rows(en_ids, MAX_LENGTH)
    targets = pad_rows([[start_id] + list(row[: MAX_LENGTH - 1]) + [end_id] for row in fr_ids],
                       MAX_LENGTH + 1)
    return (sources, targets[:, :-1], targets[:, 1:]), (int(long_sources), int(long_targets))


def make_dataset(arrays, shuffle):
    sources, decoder_inputs, labels = arrays
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"encoder_inputs": sources, "decoder_inputs": decoder_inputs}, labels)
    )
    if shuffle:
        dataset = dataset.shuffle(len(labels), seed=0, reshuffle_each_iteration=True)
    return dataset.batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)


def build_model(en_vocab_size, fr_vocab_size):
    """The example's functional model. Returns (model, layers) where `layers`
    gives the decoding code direct access to the shared layers."""
    layers = dict(
        en_embedding=keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size=en_vocab_size, sequence_length=MAX_LENGTH,
            embedding_dim=EMBED_DIM, mask_zero=True, name="en_embedding",
        ),
        encoder=keras_hub.layers.TransformerEncoder(
            intermediate_dim=INTERMEDIATE_DIM, num_heads=NUM_HEADS, name="encoder"
        ),
        fr_embedding=keras_hub.layers.TokenAndPositionEmbedding(
            vocabulary_size=fr_vocab_size, sequence_length=MAX_LENGTH,
            embedding_dim=EMBED_DIM, mask_zero=True, name="fr_embedding",
        ),
        decoder=keras_hub.layers.TransformerDecoder(
            intermediate_dim=INTERMEDIATE_DIM, num_heads=NUM_HEADS, name="decoder"
        ),
        dropout=keras.layers.Dropout(0.5, name="dropout"),
        output=keras.layers.Dense(fr_vocab_size, activation="softmax", name="output"),
    )
    encoder_inputs = keras.Input(shape=(None,), dtype="int32", name="encoder_inputs")
    decoder_inputs = keras.Input(shape=(None,), dtype="int32", name="decoder_inputs")
    # Padding masks travel with the tensors (mask_zero=True): the encoder and
    # the decoder's cross-attention skip padded source positions, the
    # decoder's self-attention skips padded target positions (on top of its
    # causal mask), and the loss and accuracy skip padded label positions.
    encoded = layers["encoder"](layers["en_embedding"](encoder_inputs))
    x = layers["decoder"](layers["fr_embedding"](decoder_inputs), encoded)
    probabilities = layers["output"](layers["dropout"](x))
    model = keras.Model([encoder_inputs, decoder_inputs], probabilities, name="keras_hub_transformer")
    return model, layers


def make_greedy_translator(layers, en_tokenizer, fr_tokenizer):
    """Returns `sources (N, 96) ids -> (N, 96) ids` decoding greedily with
    GreedySampler: at each step the whole decoder re-runs on the 96-token
    prompt ([START], the tokens so far, then [PAD]s; no key/value cache) and
    the probabilities at position index - 1 pick the next token. Wrapped in
    tf.function (the example runs it eagerly)."""
    start_id, end_id = fr_tokenizer.token_to_id("[START]"), fr_tokenizer.token_to_id("[END]")
    sampler = keras_hub.samplers.GreedySampler()

    @tf.function(reduce_retracing=True)
    def translate(source_ids):
        source_mask = source_ids != 0
        # The example recomputes the encoder inside `next` at every step; it
        # is the same for every step, so it runs once per batch here.
        encoded = layers["encoder"](layers["en_embedding"](source_ids), padding_mask=source_mask)

        def next(prompt, cache, index):
            x = layers["fr_embedding"](prompt)
            x = layers["decoder"](x, encoded, decoder_padding_mask=prompt != 0,
                                  encoder_padding_mask=source_mask)
            # The example applies the output Dense to all 96 positions and
            # keeps position index - 1; the Dense acts on each position
            # alone, so applying it to that position only gives the same
            # numbers, about 1.7x faster on CPU with a 5,966-token vocabulary.
            probabilities = layers["output"](x[:, index - 1, :])
            # The sampler softmaxes what it is given; the argmax of
            # softmax(p) is the argmax of p, so greedy output is unchanged.
            return probabilities, None, cache

        batch = tf.shape(source_ids)[0]
        prompt = tf.concat([tf.fill([batch, 1], start_id),
                            tf.zeros([batch, MAX_LENGTH - 1], tf.int32)], axis=1)
        return sampler(next, prompt, stop_token_ids=[end_id], index=1)

    return translate


def ids_to_text(rows, fr_tokenizer):
    """Detokenizes generated rows: drops [START], cuts at the first [END]."""
    start_id, end_id = fr_tokenizer.token_to_id("[START]"), fr_tokenizer.token_to_id("[END]")
    kept = []
    for row in rows:
        tokens = [int(t) for t in row if t != start_id]
        if end_id in tokens:
            tokens = tokens[: tokens.index(end_id)]
        kept.append([t for t in tokens if t != 0] or [0])
    texts = fr_tokenizer.detokenize(kept)  # a list of str in eager mode
    texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]
    return [tidy_french(t.replace("[PAD]", "")) for t in texts]


def tidy_french(text):
    """Undoes the spaces that WordPiece detokenization puts around
    punctuation, so the output is written like the references (fair to the
    reference model: sacreBLEU's 13a tokenizer does not split apostrophes or
    hyphens, so `l ' abîme` and `au - dessus` would otherwise never match
    `l'abîme` and `au-dessus`). No space before , . ; : ! ? ), none after (,
    none around apostrophes or word-internal hyphens."""
    text = re.sub(r"\s+([,.;:!?)])", r"\1", text)
    text = re.sub(r"\(\s+", "(", text)
    text = re.sub(r"\s*'\s*", "'", text)
    text = re.sub(r"(?<=\w)\s+-\s+(?=\w)", "-", text)
    return re.sub(r"\s+", " ", text).strip()


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    started = time.time()

    data = {split: load_bible_pairs(split) for split in ("train", "valid", "test")}
    train_en, train_fr = data["train"]
    print(f"pairs: train {len(train_en)}, valid {len(data['valid'][0])}, test {len(data['test'][0])}")

    start = time.time()
    en_tokenizer, fr_tokenizer = make_tokenizer(train_en), make_tokenizer(train_fr)
    vocabulary_seconds = time.time() - start
    en_vocab, fr_vocab = en_tokenizer.vocabulary_size(), fr_tokenizer.vocabulary_size()
    print(f"WordPiece vocabularies: English {en_vocab}, French {fr_vocab} ({vocabulary_seconds:.0f} s)")

    train_arrays, (long_en, long_fr) = encode_pairs(train_en, train_fr, en_tokenizer, fr_tokenizer)
    valid_arrays, _ = encode_pairs(*data["valid"], en_tokenizer, fr_tokenizer)
    print(f"truncated to {MAX_LENGTH} tokens: {long_en} English, {long_fr} French training sentences")
    train = make_dataset(train_arrays, shuffle=True)
    valid = make_dataset(valid_arrays, shuffle=False)

    model, layers = build_model(en_vocab, fr_vocab)
    model.compile(
        optimizer="rmsprop",
        # ignore_class=0 makes the [PAD] labels drop out even without the
        # propagated mask (with it, they are dropped once, not twice).
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False, ignore_class=0),
        metrics=["accuracy"],
    )
    parameters = model.count_params()
    print(f"model: {parameters:,} parameters")
    model.summary()

    budget = WallClockBudget(args.max_minutes)
    train_start, train_load = time.time(), LoadSampler()
    history = model.fit(train, validation_data=valid, epochs=args.epochs,
                        callbacks=[budget], verbose=2, shuffle=False)  # shuffled by tf.data
    train_seconds, train_load = time.time() - train_start, train_load.finish()
    steps = int(model.optimizer.iterations.numpy())
    steps_per_epoch = math.ceil(len(train_arrays[2]) / BATCH_SIZE)
    print(f"trained {train_seconds:.0f} s, {steps} steps ({steps / steps_per_epoch:.2f} epochs)")

    test_en, test_fr = data["test"]
    if args.max_test_sentences:
        test_en, test_fr = test_en[: args.max_test_sentences], test_fr[: args.max_test_sentences]
    (test_sources, _, _), _ = encode_pairs(test_en, test_fr, en_tokenizer, fr_tokenizer)
    translate = make_greedy_translator(layers, en_tokenizer, fr_tokenizer)
    decode_start, decode_load, hypotheses = time.time(), LoadSampler(), []
    for i in range(0, len(test_sources), args.decode_batch_size):
        batch = tf.constant(test_sources[i:i + args.decode_batch_size])
        hypotheses += ids_to_text(translate(batch).numpy(), fr_tokenizer)
        print(f"decoded {len(hypotheses)}/{len(test_sources)} test sentences "
              f"({time.time() - decode_start:.0f} s)", flush=True)
    decode_seconds, decode_load = time.time() - decode_start, decode_load.finish()

    scores = translation_scores(hypotheses, list(test_fr))
    samples = [{"source": s, "output": h, "reference": r}
               for s, h, r in list(zip(test_en, hypotheses, test_fr))[:3]]
    metrics = {
        "model": "KerasHub translation example: 1 TransformerEncoder + 1 TransformerDecoder, "
                 f"embed {EMBED_DIM}, ff {INTERMEDIATE_DIM}, {NUM_HEADS} heads, WordPiece "
                 f"{en_vocab}+{fr_vocab} (vocabulary_size={VOCAB_SIZE} asked), pad-to-{MAX_LENGTH} "
                 f"batches of {BATCH_SIZE}, rmsprop, greedy (GreedySampler, no cache)",
        "test_bleu": round(scores["bleu"], 2),
        "test_chrf": round(scores["chrf"], 2),
        "bleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "test_sentences": len(hypotheses),
        "valid_loss": round(float(history.history["val_loss"][-1]), 4),
        "valid_accuracy": round(float(history.history["val_accuracy"][-1]), 4),
        "train_loss": round(float(history.history["loss"][-1]), 4),
        "max_minutes": args.max_minutes,
        "train_seconds": round(train_seconds, 1),
        "steps": steps,
        "epochs_run": len(history.history["loss"]),
        "epochs_equivalent": round(steps / steps_per_epoch, 3),
        "parameters": int(parameters),
        "vocabulary_sizes": {"english": int(en_vocab), "french": int(fr_vocab)},
        "vocabulary_seconds": round(vocabulary_seconds, 1),
        "truncated_train_sentences": {"english": long_en, "french": long_fr},
        "test_decode_seconds": round(decode_seconds, 1),
        "total_seconds": round(time.time() - started, 1),
        "load_average_1min": {"cpu_count": os.cpu_count(), "train": train_load,
                              "decode": decode_load},
        "versions": {"keras": keras.__version__, "keras_hub": keras_hub.__version__,
                     "tensorflow": tf.__version__},
        "samples": samples,
    }
    print(f"test BLEU {scores['bleu']:.2f} ({scores['bleu_signature']})")
    print(f"test chrF {scores['chrf']:.2f} ({scores['chrf_signature']})")
    for sample in samples:
        print(f"  {sample['source']}\n  -> {sample['output']}\n  (reference: {sample['reference']})")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
    print(f"wrote {args.output}")
    return metrics


if __name__ == "__main__":
    # The same process settings as kseq's recipes (allocator, thread pools),
    # so the comparison is between the models and pipelines, not the runtime.
    tune_cpu_runtime()
    main()
