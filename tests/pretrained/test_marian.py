"""Marian checkpoints in kseq against the reference implementation's outputs
(tests/fixtures/marian: made by make_fixtures.py with transformers 5 and
PyTorch, in an environment of their own): logits, tokenizer ids and text,
greedy and beam generations, and the export served by TensorFlow alone."""

import functools
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch, Limits
from kseq.models import TransformerSeq2Seq
from kseq.pretrained import load_marian, marian_tokenizers
from kseq.special_ids import BOS_ID

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "marian")
NAMES = ("joint_swish", "separate_gelu")


def reference(name):
    with open(os.path.join(FIXTURES, name, "reference.json"), encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def checkpoint(name):
    """The fixture checkpoint `name`, loaded once a test process."""
    return load_marian(os.path.join(FIXTURES, name))


@pytest.fixture(params=NAMES)
def loaded(request):
    return request.param, checkpoint(request.param), reference(request.param)


def test_the_two_checkpoints_differ_where_the_loader_branches():
    joint, separate = (checkpoint(name).model for name in NAMES)
    assert joint.share_embeddings and not separate.share_embeddings and separate.tie_output_embedding
    assert (joint.activation, separate.activation) == ("silu", "gelu")
    assert len(separate.decoder_blocks) < len(separate.encoder_blocks)
    assert separate.decoder_blocks[0].num_heads != separate.encoder_blocks[0].num_heads
    assert separate.decoder_blocks[0].ff_dim != separate.encoder_blocks[0].ff_dim
    assert separate.source_vocab_size != separate.target_vocab_size
    assert float(np.abs(separate.output_bias.numpy()).max()) > 0.1  # final_logits_bias, not zeros
    assert joint.position == separate.position == "sinusoidal_halves"
    generation = reference("separate_gelu")["generation"]
    assert generation["greedy"]["ids"] != generation["beam"]["ids"]  # a source whose beams find another output


def test_logits_match_the_reference_within_1e4(loaded):
    name, checkpoint, expected = loaded
    logits = np.load(os.path.join(FIXTURES, name, "reference.npz"))["logits"]
    source = checkpoint.source_tokenizer.kseq_ids(expected["logits"]["source_ids"])
    target = checkpoint.target_tokenizer.kseq_ids(expected["logits"]["decoder_input_ids"])
    assert (target[:, 0] == 0).all()  # Marian starts from PAD: kseq's BOS takes its row
    target[:, 0] = BOS_ID
    ours = checkpoint.model({"source_ids": source, "target_ids": target}).numpy()
    in_marian_order = np.zeros_like(logits)
    in_marian_order[..., checkpoint.target_tokenizer.order] = ours  # kseq's PAD and BOS columns: PAD's
    real = np.array(expected["logits"]["real_positions"])
    assert real.sum() > 20 and not real.all()  # a padded batch
    difference = np.abs(in_marian_order - logits)[real]
    assert difference.max() < 1e-4, difference.max()


def test_tokenizers_give_the_reference_ids_and_text(loaded):
    _, checkpoint, expected = loaded
    rows = expected["tokenizer"]
    texts = [row["text"] for row in rows]
    source, target = checkpoint.source_tokenizer, checkpoint.target_tokenizer
    for got, row in zip(source.tokenize(texts).to_list(), rows):
        assert source.marian_ids(got).tolist() == row["source_ids"], row["text"]
    target_ids = target.tokenize(texts).to_list()
    for got, row in zip(target_ids, rows):
        assert target.marian_ids(got).tolist() + [0] == row["target_ids"], row["text"]  # + Marian's EOS
    width = max(len(ids) for ids in target_ids) + 1
    padded = [ids + [2] + [0] * (width - len(ids) - 1) for ids in target_ids]
    for text, row in zip(target.detokenize(padded).numpy(), rows):
        assert text.decode("utf-8") == row["target_text_to_first_eos"], row["text"]
    assert sum(row["target_text"] == row["target_text_to_first_eos"] for row in rows) == len(rows) - 1
    assert any(3 in ids for ids in target_ids)  # characters outside the vocabulary: UNK


def test_tokenizer_runs_in_tf_data():
    # Made after this test's seed: TensorFlow's reseed drops a SentencePiece op's model (kseq._compat).
    tokenizer, _ = marian_tokenizers(os.path.join(FIXTURES, "separate_gelu"))
    rows = reference("separate_gelu")["tokenizer"]
    texts = tf.data.Dataset.from_tensor_slices([row["text"] for row in rows]).batch(4)
    ids = [row for batch in texts.map(tokenizer.tokenize) for row in batch.to_list()]
    assert [tokenizer.marian_ids(row).tolist() for row in ids] == [r["source_ids"] for r in rows]


def searches(settings):
    """kseq's searches under the reference's settings: max_length counts the
    decoder's start, forced_eos_token_id makes the last token EOS (kseq's
    length limit per row does), length penalty 0 on both scales."""
    limits = Limits(settings["max_length"] - 1, max_length_ratio=1000.0)
    beam = settings["beam"]
    assert beam["length_penalty"] == 0.0 and not beam["early_stopping"] and settings["renormalize_logits"]
    return {"greedy": GreedySearch(limits=limits),
            "beam": BeamSearch(limits=limits, beam_size=beam["num_beams"], length_penalty=0.0)}


def test_greedy_and_beam_search_give_the_reference_tokens_and_text(loaded):
    _, checkpoint, expected = loaded
    generation = expected["generation"]
    source = checkpoint.source_tokenizer.kseq_ids(generation["source_ids"])
    assert generation["greedy"]["smallest_margin"] > 1e-3  # float32 rounding cannot flip a choice
    for name, search in searches(generation["settings"]).items():
        ids = checkpoint.model.generate(source, search=search).numpy()
        rows = [checkpoint.target_tokenizer.marian_ids(row[:list(row).index(2) + 1]).tolist() for row in ids]
        assert rows == generation[name]["ids"], name
        text = checkpoint.target_tokenizer.detokenize(ids).numpy()
        assert [t.decode("utf-8") for t in text] == generation[name]["text"], name


def test_from_pretrained_is_the_loaded_model():
    folder = os.path.join(FIXTURES, "separate_gelu")
    model = TransformerSeq2Seq.from_pretrained(folder, dropout=0.0)
    assert model.dropout == 0.0
    twin = checkpoint("separate_gelu").model
    for mine, theirs in zip(model.weights, twin.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    config = model.get_config()
    rebuilt = TransformerSeq2Seq.from_config(config)
    assert rebuilt.get_config() == config


@pytest.mark.e2e
@pytest.mark.long
def test_the_export_served_by_tensorflow_alone_gives_the_reference_strings(made_once, tf_only):
    def make(folder):
        from kseq.export import export_translator

        loaded = checkpoint("joint_swish")
        settings = reference("joint_swish")["generation"]["settings"]
        return export_translator(loaded.model, loaded.source_tokenizer, loaded.target_tokenizer,
                                 str(folder), search=searches(settings)["greedy"], max_source_length=64)

    _, path = made_once("marian-joint-export", make)
    generation = reference("joint_swish")["generation"]
    reply = tf_only.serve(path, {"source": generation["sources"]})
    assert not reply["modules"]  # no kseq, keras or keras_hub in the serving process
    assert reply["answers"][0]["outputs"]["translation"] == generation["greedy"]["text"]


def test_ctranslate2_gives_the_greedy_tokens_of_kseq_and_of_its_own_converter(tmp_path):
    """kseq's CTranslate2 export of a loaded Marian model gives kseq's greedy
    tokens; so does CTranslate2's own converter of the checkpoint (run where
    transformers is, make_fixtures.py: its tokens are in reference.json)."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    from kseq.export import export_ctranslate2
    from kseq.export.ctranslate2_model import vocabulary

    loaded, expected = checkpoint("joint_swish"), reference("joint_swish")
    generation = expected["generation"]
    theirs = expected["ctranslate2"]
    assert "tokens" in theirs, theirs  # its converter took this checkpoint (the separate one it refuses)
    path = export_ctranslate2(loaded.model, loaded.source_tokenizer, loaded.target_tokenizer, str(tmp_path / "ct2"))
    source_tokens, target_tokens = vocabulary(loaded.source_tokenizer), vocabulary(loaded.target_tokenizer)
    source_ids = loaded.source_tokenizer.tokenize(generation["sources"]).to_list()
    translator = ctranslate2.Translator(path, device="cpu", intra_threads=2)
    results = translator.translate_batch([[source_tokens[i] for i in row] for row in source_ids], beam_size=1,
                                         max_decoding_length=generation["settings"]["max_length"] - 1)
    greedy = [[target_tokens[i] for i in loaded.target_tokenizer.kseq_ids(row[:-1])]  # EOS left out
              for row in generation["greedy"]["ids"]]
    assert [r.hypotheses[0] for r in results] == greedy
    assert theirs["tokens"] == greedy
