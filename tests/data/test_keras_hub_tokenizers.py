"""keras-hub tokenizers behind kseq's interface: SubwordTokenizer (keras-hub's
SentencePieceTokenizer), user WordPiece and BPE vocabularies, the loader
behind `--tokenizer PATH`, and the checks of what an export accepts."""

import dataclasses
import json
import os
import random

import keras_hub
import pytest
import tensorflow as tf

from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.keras_hub_tokenizer import KerasHubTokenizer
from kseq.data.subword_tokenizer import SubwordTokenizer
from kseq.data.tokenizers import byte_pair_tokenizer, load_tokenizer, word_piece_tokenizer
from kseq.errors import UsageError
from kseq.export import export_classifier
from kseq.models import SequenceClassifier

SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
UNSEEN = "Zoë said «ça va?» — 漢字 Ω 🙂 x\u00a0y"


def corpus(count=400, seed=0):
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghij", k=rng.randint(2, 6))) for _ in range(80)]
    return [" ".join(rng.choices(words, k=rng.randint(2, 12))) for _ in range(count)]


@pytest.fixture(scope="module")
def texts():
    return corpus()


@pytest.fixture(scope="module")
def subword(texts):
    return SubwordTokenizer.train(texts, vocab_size=320)


def word_piece_vocabulary(texts, first):
    """A user's WordPiece vocabulary: `first`, whole words, letters and
    "##" suffix letters (what keras-hub's compute_word_piece_vocabulary
    gives, without its seconds of training)."""
    words = sorted({word for text in texts for word in text.split()})[:60]
    letters = sorted({c for text in texts for c in text if c != " "})
    return list(first) + words + letters + ["##" + c for c in letters]


@pytest.fixture(scope="module")
def word_piece_file(texts, tmp_path_factory):
    """A vocab.txt in BERT's layout ([PAD] [CLS] [SEP] [UNK] [MASK] first)."""
    path = tmp_path_factory.mktemp("word_piece") / "vocab.txt"
    vocabulary = word_piece_vocabulary(texts, ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"])
    path.write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def byte_pair_files(texts, tmp_path_factory):
    """GPT-2 style vocab.json + merges.txt (byte-level BPE, all 256 bytes),
    trained with the `tokenizers` package keras-hub depends on."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder = tmp_path_factory.mktemp("byte_pair")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(texts, trainer)
    bpe.model.save(str(folder))
    return str(folder / "vocab.json"), str(folder / "merges.txt")


def decoded(strings):
    return [s.decode("utf-8") for s in strings.numpy()]


def test_subword_tokenizer_is_keras_hubs_sentence_piece_with_kseq_ids(subword, texts):
    assert isinstance(subword, KerasHubTokenizer)
    assert isinstance(subword.tokenizer, keras_hub.tokenizers.SentencePieceTokenizer)
    assert subword.id_offset == 0 and subword.id_to_piece([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    ids = subword.tokenize(texts[:50] + [UNSEEN, ""])
    assert ids.dtype == tf.int32
    # Unseen characters go through byte fallback: never PAD/BOS/EOS, never UNK.
    assert int(tf.reduce_min(ids.flat_values)) > 3
    assert decoded(subword.detokenize(ids.to_tensor())) == texts[:50] + [UNSEEN, ""]
    # The same ids keras-hub's layer gives, and the same in tf.data.
    assert ids.to_list() == [list(row) for row in subword.tokenizer.tokenize(texts[:50] + [UNSEEN, ""])]
    mapped = tf.data.Dataset.from_tensor_slices([UNSEEN, texts[0]]).batch(2).map(subword.tokenize)
    assert next(iter(mapped)).to_list() == subword.tokenize([UNSEEN, texts[0]]).to_list()


def test_subword_save_load_and_bad_models(subword, tmp_path):
    path = str(tmp_path / "spm.model")
    subword.save(path)
    assert os.listdir(tmp_path) == ["spm.model"], "written atomically: no temporary file left"
    loaded = SubwordTokenizer.load(path)
    assert loaded.tokenize([UNSEEN]).to_list() == subword.tokenize([UNSEEN]).to_list()
    assert loaded.vocab_size == subword.vocab_size and loaded.asset_files() == {"spm.model": subword.proto}
    with pytest.raises(ValueError, match="`proto` is not a SentencePiece model"):
        SubwordTokenizer(b"not a model")
    with pytest.raises(FileNotFoundError):
        SubwordTokenizer.load(str(tmp_path / "missing.model"))


def test_word_piece_vocabulary_with_shifted_ids(word_piece_file, texts, tmp_path):
    tokenizer = load_tokenizer(word_piece_file)
    hub = tokenizer.tokenizer
    assert isinstance(hub, keras_hub.tokenizers.WordPieceTokenizer)
    assert tokenizer.vocab_size == hub.vocabulary_size() + 4
    ids = tokenizer.tokenize([texts[0], "abc zzz"])
    hub_ids = hub.tokenize([texts[0], "abc zzz"])
    # Vocabulary ids move up by 4; the vocabulary's [UNK] becomes kseq's UNK.
    assert ids.to_list()[0] == [i + 4 for i in hub_ids[0]]
    assert 3 in ids.to_list()[1] and hub.token_to_id("[UNK]") + 4 not in ids.flat_values.numpy()
    assert decoded(tokenizer.detokenize(ids.to_tensor()))[0] == texts[0]
    row = ids.to_list()[0]
    assert decoded(tokenizer.detokenize([[1] + row + [2, 9, 0]])) == [texts[0]], "BOS dropped, stops at EOS"
    # tf.data: a pipeline's ids are the eager ones.
    mapped = tf.data.Dataset.from_tensor_slices([texts[0], "abc zzz"]).batch(2).map(tokenizer.tokenize)
    assert next(iter(mapped)).to_list() == ids.to_list()
    # save/load: one JSON file that load_tokenizer reads back.
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    again = load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert type(again) is KerasHubTokenizer and again.tokenize(["abc zzz"]).to_list() == ids.to_list()[1:]
    assert tokenizer.id_to_piece([0, 3, row[0]]) == ["<pad>", "<unk>", hub.id_to_token(row[0] - 4)]


def test_vocabulary_holding_kseqs_special_tokens_keeps_its_ids(texts, tmp_path):
    vocabulary = word_piece_vocabulary(texts, SPECIALS)
    hub = keras_hub.tokenizers.WordPieceTokenizer(vocabulary)
    tokenizer = KerasHubTokenizer(hub, special_tokens=SPECIALS)
    assert tokenizer.id_offset == 0 and tokenizer.vocab_size == len(vocabulary)
    assert tokenizer.tokenize([texts[2] + " zzz"]).to_list() == [list(hub.tokenize(texts[2] + " zzz"))]
    assert decoded(tokenizer.detokenize([[1, 3, 2]])) == ["[UNK]"]
    tokenizer.save(str(tmp_path / "t.json"))
    assert load_tokenizer(str(tmp_path / "t.json")).special_tokens == tuple(SPECIALS)


def test_byte_pair_vocabulary_round_trips_any_text(byte_pair_files, texts, tmp_path):
    """Byte-level BPE spells any text; a byte the vocabulary lacks (here
    "~", removed with the rules that use it) is UNK, which has no text.
    One tokenizer, one trace: keras-hub's BPE graph takes seconds to trace."""
    vocabulary_file, merges_file = byte_pair_files
    with open(vocabulary_file, encoding="utf-8") as f:
        vocabulary = {token: i for token, i in json.load(f).items() if "~" not in token}
    with open(merges_file, encoding="utf-8") as f:
        merges = [line for line in f.read().splitlines() if "~" not in line]
    (tmp_path / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("\n".join(merges) + "\n", encoding="utf-8")
    tokenizer = load_tokenizer(f"{tmp_path / 'vocab.json'},{tmp_path / 'merges.txt'}")
    assert isinstance(tokenizer.tokenizer, keras_hub.tokenizers.BytePairTokenizer)
    assert tokenizer.vocab_size == max(vocabulary.values()) + 1 + 4
    samples = texts[:20] + [UNSEEN, "", "  two  spaces ", "a~b"]
    ids = tokenizer.tokenize(samples)
    *kept, tilde = ids.to_list()
    assert min(min(row, default=9) for row in kept) > 3, "every other byte is in the vocabulary"
    assert 3 in tilde and min(tilde) == 3, "keras-hub's -1 for a missing token became UNK"
    assert decoded(tokenizer.detokenize(ids.to_tensor())) == samples[:-1] + ["ab"]
    # A model may generate bytes that are no UTF-8 (0xCD alone, 'Í' in BPE's
    # byte alphabet): detokenize writes U+FFFD, never an invalid string.
    a, lone = vocabulary["a"] + 4, vocabulary["Í"] + 4
    assert decoded(tokenizer.detokenize([[a, lone, a, 2]])) == ["a\ufffda"]
    assert type(load_tokenizer(str(tmp_path))) is KerasHubTokenizer, "a folder with vocab.json"


def test_load_tokenizer_tells_files_apart(subword, tmp_path):
    spm = str(tmp_path / "spm.model")
    subword.save(spm)
    assert type(load_tokenizer(spm)) is SubwordTokenizer
    # A SentencePiece model with other special ids (keras-hub's trainer's):
    # keras-hub's layer behind shifted ids.
    dataset = tf.data.Dataset.from_tensor_slices(corpus(100))
    proto = keras_hub.tokenizers.compute_sentence_piece_proto(dataset, 60)
    with open(tmp_path / "other.model", "wb") as f:
        f.write(proto)
    other = load_tokenizer(str(tmp_path / "other.model"))
    assert type(other) is KerasHubTokenizer and other.id_offset == 4
    assert other.vocab_size == 64 and 3 in other.tokenize(["abc ☃"]).flat_values.numpy()
    characters = str(tmp_path / "chars.json")
    CharacterTokenizer("abc").save(characters)
    assert type(load_tokenizer(characters)) is CharacterTokenizer


def test_bad_vocabularies_name_the_argument(word_piece_file, byte_pair_files, tmp_path):
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match=r"`path` .*missing.txt: No such file"):
        load_tokenizer(missing)
    with pytest.raises(ValueError, match="`vocabulary_file` .*missing.txt: No such file"):
        word_piece_tokenizer(missing)
    (tmp_path / "no_unk.txt").write_text("[PAD]\nhello\nworld\n", encoding="utf-8")
    with pytest.raises(ValueError, match="`vocabulary_file` .*no_unk.txt has no '\\[UNK\\]' token.*`unknown_token`"):
        load_tokenizer(str(tmp_path / "no_unk.txt"))
    with pytest.raises(ValueError, match="`unknown_token` '<unk>' is not in the vocabulary"):
        KerasHubTokenizer(keras_hub.tokenizers.BytePairTokenizer({"a": 0, "b": 1, "ab": 2}, ["a b"]),
                          unknown_token="<unk>")
    with pytest.raises(ValueError, match=r"`special_tokens` .* must be the vocabulary's ids 0, 1, 2, 3.*\(0, None, None, 3\)"):
        KerasHubTokenizer(keras_hub.tokenizers.WordPieceTokenizer(["[PAD]", "a", "b", "[UNK]"]),
                          special_tokens=SPECIALS)
    with pytest.raises(ValueError, match="`special_tokens` must name 4 tokens"):
        word_piece_tokenizer(word_piece_file, special_tokens=["[PAD]"])
    vocabulary, merges = byte_pair_files
    (tmp_path / "bad_merges.txt").write_text("#version: 0.2\nq \u2603\n", encoding="utf-8")
    with pytest.raises(ValueError, match="`merges_file` .*bad_merges.txt has 1 rule"):
        byte_pair_tokenizer(vocabulary, str(tmp_path / "bad_merges.txt"))
    with pytest.raises(ValueError, match="needs its merges"):
        load_tokenizer(vocabulary)
    with pytest.raises(ValueError, match="`merges_file` .*nope.txt: No such file"):
        load_tokenizer(vocabulary + "," + str(tmp_path / "nope.txt"))
    with pytest.raises(ValueError, match="holds no vocab.json"):
        load_tokenizer(str(tmp_path))
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="`path` .*binary.bin is no tokenizer kseq reads"):
        load_tokenizer(str(tmp_path / "binary.bin"))
    with pytest.raises(ValueError, match="`tokenizer` must be a keras_hub.tokenizers.Tokenizer"):
        KerasHubTokenizer(CharacterTokenizer("ab"))
    with pytest.raises(ValueError, match="`tokenizer` must return ragged ids"):
        KerasHubTokenizer(keras_hub.tokenizers.WordPieceTokenizer(["[UNK]"], sequence_length=8))
    with pytest.raises(ValueError, match="`tokenizer` must output integer ids"):
        KerasHubTokenizer(keras_hub.tokenizers.WordPieceTokenizer(["[UNK]"], dtype="string"))


def test_the_deprecated_from_keras_hub_warns_and_gives_the_same_tokenizer(texts):
    """`from_keras_hub`, a second name for `KerasHubTokenizer(...)`, still
    works for code that calls it, and warns."""
    from kseq.data import from_keras_hub

    hub = keras_hub.tokenizers.WordPieceTokenizer(word_piece_vocabulary(texts, SPECIALS))
    with pytest.warns(DeprecationWarning, match="use `kseq.data.KerasHubTokenizer"):
        old = from_keras_hub(hub, special_tokens=SPECIALS)
    new = KerasHubTokenizer(hub, special_tokens=SPECIALS)
    assert type(old) is KerasHubTokenizer and old.special_tokens == new.special_tokens == tuple(SPECIALS)
    assert old.tokenize(texts[:3]).to_list() == new.tokenize(texts[:3]).to_list()


def test_export_refuses_a_bare_keras_hub_tokenizer(word_piece_file, tmp_path):
    """Its ids are not kseq's; the wrapper's are (the export and serving of
    a wrapped one: tests/export/test_serving_load.py)."""
    tokenizer = load_tokenizer(word_piece_file)
    model = SequenceClassifier(tokenizer.vocab_size, 2, embed_dim=8, units=8)
    with pytest.raises(ValueError, match="bare keras-hub WordPieceTokenizer.*KerasHubTokenizer"):
        export_classifier(model, tokenizer.tokenizer, ["no", "yes"], str(tmp_path / "bare"))
    assert not os.path.exists(tmp_path / "bare" / "1")


def test_tasks_take_a_tokenizer_path(word_piece_file, tmp_path, capsys):
    """`--tokenizer PATH` (kseq-train classify, language_model, translate):
    a missing path is a usage error naming the option; a file is loaded,
    and its files land in the logdir, where load_tokenizer reads them."""

    from kseq.tasks import classify
    from kseq.tasks import language_model
    from kseq.tasks import translate

    from kseq.data.tokenizers import tokenizer_files
    from kseq.training.vocabulary import run_tokenizer

    missing = str(tmp_path / "missing.txt")
    for script in (classify, language_model, translate):
        with pytest.raises(SystemExit):
            script.main(["--tokenizer", missing])
        assert f"--tokenizer {missing}: {missing}: no such file or folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        classify.main(["--tokenizer", f"{word_piece_file},{missing}"])
    assert f"{missing}: no such file or folder" in capsys.readouterr().err
    options = language_model.parse_args(["--tokenizer", word_piece_file, "--logdir", str(tmp_path)])
    tokenizer = run_tokenizer([], options.logdir, path=options.tokenizer, vocab_size=1)
    assert isinstance(tokenizer.tokenizer, keras_hub.tokenizers.WordPieceTokenizer)
    saved = load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert saved.tokenize(["abc zzz"]).to_list() == tokenizer.tokenize(["abc zzz"]).to_list()
    assert tokenizer_files(tokenizer) == {"tokenizer.json": (tmp_path / "tokenizer.json").read_bytes()}
    (tmp_path / "no_unk.txt").write_text("hello\n", encoding="utf-8")
    options = dataclasses.replace(options, tokenizer=str(tmp_path / "no_unk.txt"))
    with pytest.raises(UsageError, match="--tokenizer .*no_unk.txt: `vocabulary_file` .* has no '\\[UNK\\]'"):
        run_tokenizer([], options.logdir, path=options.tokenizer, vocab_size=1)
