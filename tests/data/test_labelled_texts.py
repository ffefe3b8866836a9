"""Labelled texts streamed from files (kseq.data.labelled_texts): the scan
counts the labels, every training text trains once an epoch with its
label, a resumed pipeline streams exactly the rest, and workers split the
lines."""

import random
import string

import numpy as np
import pytest
import tensorflow as tf

from kseq.data import CharacterTokenizer
from kseq.data.corpus import MAX_LABELS, HoldOut, scan_corpus, training_pairs
from kseq.data.labelled_texts import describe_epoch, labelled_dataset, padded_batches
from kseq.training.loop.fit import counted
from kseq.training.checkpoints.resume import TrainingPosition

TOKENIZER = CharacterTokenizer(string.ascii_lowercase + " ")
NAMES = ["neg", "pos"]


def labelled(count, seed=0):
    """`count` different (text, label) pairs, the label a function of the text's first letter."""
    rng, found = random.Random(seed), {}
    while len(found) < count:
        text = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 12)))
        found[text] = "pos" if text[0] < "n" else "neg"
    return list(found.items())


def write(path, pairs, extra=()):
    path.write_text("".join(f"{text}\t{label}\n" for text, label in pairs) + "".join(extra), encoding="utf-8")
    return str(path)


def stream(scan, position=None, batch_size=16, **settings):
    """The batches as (texts, class ids) lists, and the position."""
    position = position or TrainingPosition()

    def examples(texts, class_ids):
        return TOKENIZER.tokenize(texts), class_ids

    dataset = labelled_dataset(scan, NAMES, position, examples, *padded_batches(batch_size),
                               **{"seed": 5, **settings})
    ids, class_ids = zip(*((ids.numpy(), class_ids.numpy()) for ids, class_ids in dataset))
    texts = iter(detokenized(ids))
    return [[(next(texts), NAMES[i]) for i in batch] for batch in class_ids], position


def detokenized(batches):
    """The texts of every batch's rows, in order, detokenized in one call
    (one call a batch cost seconds a stream): the batches are padded with
    PAD, which detokenize drops, to one width."""
    width = max(batch.shape[1] for batch in batches)
    padded = np.concatenate([np.pad(batch, ((0, 0), (0, width - batch.shape[1]))) for batch in batches])
    return [text.decode() for text in TOKENIZER.detokenize(padded).numpy()]


def test_a_labelled_scan_counts_each_label_of_the_training_lines(tmp_path):
    pairs = labelled(300)
    path = write(tmp_path / "t.tsv", pairs, extra=["no label here\n", "text\t  \n"])
    scan = scan_corpus([path], hold_out=HoldOut(every=10, limit=5), cache_dir=tmp_path, count_labels=True)
    held = {pairs[i] for i in range(0, 50, 10)}
    trained = [pair for pair in pairs if pair not in held]
    assert scan.labels == {name: sum(label == name for _, label in trained) for name in NAMES}
    assert scan.bad == 2 and set(zip(*scan.valid)) == held
    assert list(training_pairs(scan)) == trained
    assert scan_corpus([path], hold_out=HoldOut(every=10, limit=5), cache_dir=tmp_path).labels is None, \
        "a scan without labels is cached apart"
    again = scan_corpus([path], hold_out=HoldOut(every=10, limit=5), cache_dir=tmp_path, count_labels=True)
    assert again.labels == scan.labels, "read back from the cache"


def test_a_second_column_of_more_than_a_few_labels_is_refused_by_line(tmp_path):
    path = write(tmp_path / "t.tsv", [(f"text {i}", f"label {i}") for i in range(MAX_LABELS + 1)])
    with pytest.raises(ValueError, match=rf"t.tsv: line {MAX_LABELS + 1} has distinct label number 1,001: "
                                         r"expected text<TAB>label lines with at most 1,000 distinct labels"):
        scan_corpus([path], cache_dir=tmp_path, count_labels=True)


@pytest.mark.parametrize("buffer", [300, 100_000])
def test_every_training_text_trains_once_an_epoch_with_its_label(tmp_path, buffer):
    pairs = labelled(2000)
    scan = scan_corpus([write(tmp_path / "t.tsv", pairs)], cache_dir=tmp_path, count_labels=True)
    batches, position = stream(scan, epochs=2, shuffle_buffer=buffer)
    windows = position.windows_per_epoch
    assert (windows > 1) == (buffer < 2000)
    per_epoch = sum(count for (epoch, _), count in position._windows.items() if epoch == 0)
    epochs = [sum(batches[:per_epoch], []), sum(batches[per_epoch:], [])]
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(pairs)
    assert epochs[0] != epochs[1], "each epoch in its own order"
    assert len(batches) == sum(position._windows.values()), "the batches each window recorded are the ones it made"
    exact = "" if windows > 1 else f"{per_epoch:,} batches of 16 per epoch"
    assert exact in describe_epoch(scan, 16, buffer)


def test_a_pipeline_started_where_a_run_stopped_streams_the_rest_of_the_uninterrupted_run(tmp_path):
    scan = scan_corpus([write(tmp_path / "t.tsv", labelled(1500))], cache_dir=tmp_path, count_labels=True)
    whole, position = stream(scan, epochs=2, shuffle_buffer=400)
    first_window = position._windows[0, 0]
    for stopped in (1, first_window, first_window + 3, len(whole) - 1):
        resumed = TrainingPosition()
        resumed.start_at(stopped, *position.where(stopped))
        rest, _ = stream(scan, resumed, epochs=2, shuffle_buffer=400)
        assert rest == whole[stopped:], stopped


def test_workers_stream_disjoint_halves_and_a_label_unknown_to_the_names_is_left_out(tmp_path):
    pairs = labelled(1000)
    scan = scan_corpus([write(tmp_path / "t.tsv", pairs + [("zzz", "other")])], cache_dir=tmp_path,
                       count_labels=True)
    assert scan.labels["other"] == 1
    shares = [set(sum(stream(scan, shard=(2, worker))[0], [])) for worker in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 500 and shares[0] | shares[1] == set(pairs)


def test_counted_gives_a_bucketed_dataset_its_length_and_leaves_a_known_one_alone():
    bucketed = tf.data.Dataset.range(10).filter(lambda x: x % 3 > 0).batch(2)
    assert int(bucketed.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert int(counted(bucketed).cardinality()) == 3
    known = tf.data.Dataset.range(5)
    assert counted(known) is known
    assert np.array_equal(np.concatenate(list(counted(bucketed).as_numpy_iterator())), [1, 2, 4, 5, 7, 8])
