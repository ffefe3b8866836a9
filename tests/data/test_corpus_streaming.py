"""Corpora on disk (kseq.data.corpus) and the batches streamed from them
(kseq.data.streaming): what a scan finds, and that the stream trains on
every good pair once an epoch, resumes anywhere exactly and splits among
workers."""

import gzip
import random
import string

import numpy as np
import pytest
import tensorflow as tf

from kseq.data import CharacterTokenizer, bucketed_pair_dataset
from kseq.data import corpus as corpus_module
from kseq.data.corpus import HoldOut, corpus_files, scan_corpus
from kseq.data.streaming import estimate_epoch, streamed_pair_dataset
from kseq.training.checkpoints.resume import TrainingPosition

LETTERS = string.ascii_lowercase + " "
TOKENIZER = CharacterTokenizer(LETTERS)
SHAPES = dict(token_budget=100, max_length=16)


def words(count, seed=0):
    """`count` different random words of 1-20 letters."""
    rng, found = random.Random(seed), {}
    while len(found) < count:
        found["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 20)))] = None
    return list(found)


def write(path, lines, compress=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return str(path)


def pair_lines(sources):
    return [f"{s}\t{s[::-1]}" for s in sources]


def stream(scan, position=None, **settings):
    position = position or TrainingPosition()
    dataset = streamed_pair_dataset(scan, TOKENIZER, TOKENIZER, position, **{**SHAPES, "seed": 3, **settings})
    return [(x["source_ids"].numpy(), y.numpy()) for x, y in dataset], position


def rows(batches):
    """Every real (source, labels) row of the batches, as tuples of ids."""
    return [(tuple(s[s > 0]), tuple(y[y > 0])) for source, labels in batches for s, y in zip(source, labels)]


def token_lists(texts):
    """Each text's ids, tokenized in one call: one eager call a text cost
    30 s for 6,000 texts on a 2-core machine."""
    return TOKENIZER.tokenize(texts).to_list()


def test_files_are_named_by_paths_globs_and_lists_and_bad_names_say_which(tmp_path):
    for name in ("b.tsv", "a.tsv", "c.tsv.gz"):
        (tmp_path / name).write_text("x\ty\n")
    (tmp_path / "folder").mkdir()
    a, b, c = (str(tmp_path / name) for name in ("a.tsv", "b.tsv", "c.tsv.gz"))
    assert corpus_files(str(tmp_path / "*.tsv")) == [a, b]
    assert corpus_files(f"{c}, {tmp_path}/*.tsv,{a}") == [c, a, b], "in the order given, each once"
    assert corpus_files([b, a]) == [b, a]
    cases = [(str(tmp_path / "none.tsv"), "--train-tsv .*none.tsv: no such file"),
             (str(tmp_path / "*.txt"), r"--train-tsv .*\*.txt: the pattern matches no file"),
             (str(tmp_path / "folder"), "--train-tsv .*folder: is a directory"),
             (" , ", "--train-tsv: names no file")]
    for spec, message in cases:
        with pytest.raises(ValueError, match=message):
            corpus_files(spec, "--train-tsv")


def test_a_scan_counts_bad_lines_by_number_holds_out_by_line_and_samples_uniformly(tmp_path):
    good = pair_lines(words(400))
    lines = good[:3] + ["no tab here", "a\tb\tc", "", "\tempty source", "x\t   "] + good[3:]
    lines.insert(10, "caf\xe9")  # not UTF-8 once written as Latin-1 below
    data = "\n".join(lines).encode("utf-8").replace("caf\xe9".encode("utf-8"), b"caf\xe9") + b"\n"
    path = tmp_path / "pairs.tsv"
    path.write_bytes(data)
    scan = scan_corpus([str(path)], sample_size=50, seed=1, cache_dir=tmp_path / "cache")
    assert scan.lines == 406 and scan.bad == 6 and scan.pairs == 400 and scan.held_out == 0
    assert scan.problems[:6] == [(str(path), 4, "no tab"), (str(path), 5, "more than one tab"),
                                 (str(path), 6, "empty line"), (str(path), 7, "empty source"),
                                 (str(path), 8, "empty target"), (str(path), 11, "not UTF-8")]
    assert scan.describe_problems(limit=2).startswith(
        "skipped 6 of 406 lines in pairs.tsv: line 4 (no tab), line 5 (more than one tab) and 4 more (")
    assert len(scan.sample[0]) == 50 and set(scan.sample[0]) <= {line.split("\t")[0] for line in good}
    assert scan.sample[0] != [line.split("\t")[0] for line in good[:50]], "drawn from the whole file"
    everything = scan_corpus([str(path)], sample_size=1000, cache_dir=tmp_path / "cache")
    assert everything.sample[0] == [line.split("\t")[0] for line in good], "all of it, in file order"

    held = scan_corpus([str(path)], hold_out=HoldOut(every=50, limit=4), cache_dir=tmp_path / "cache")
    assert held.held_out == 4 and held.pairs == 396 and held.bad == 6, "lines 0, 50, 100, 150; the rest trains"
    assert held.valid[0] == [lines[n].split("\t")[0] for n in (0, 50, 100, 150)]


def test_a_second_scan_of_the_same_files_is_read_from_the_cache_and_a_changed_file_is_scanned_again(
        tmp_path, monkeypatch):
    path = write(tmp_path / "p.tsv", pair_lines(words(30)))
    first = scan_corpus([path], cache_dir=tmp_path)
    assert first.folder.startswith(str(tmp_path / "corpora"))
    real_scan = corpus_module._scan

    def refused(*args):
        raise AssertionError("scanned again")

    monkeypatch.setattr(corpus_module, "_scan", refused)
    again = scan_corpus([path], cache_dir=tmp_path)
    assert (again.sample, again.line_counts, again.folder) == (first.sample, first.line_counts, first.folder)
    monkeypatch.setattr(corpus_module, "_scan", real_scan)
    write(tmp_path / "p.tsv", pair_lines(words(31)))
    assert scan_corpus([path], cache_dir=tmp_path).lines == 31


def test_one_window_streams_the_batches_of_the_in_memory_pipeline(tmp_path):
    sources = words(3000)
    path = write(tmp_path / "p.tsv", pair_lines(sources) + ["a bad line"])
    scan = scan_corpus([path], cache_dir=tmp_path)
    streamed, position = stream(scan, epochs=2)
    lists, report = bucketed_pair_dataset(sources, [s[::-1] for s in sources], TOKENIZER, TOKENIZER, seed=3,
                                          epochs=2, position=TrainingPosition(), **SHAPES)
    expected = [(x["source_ids"].numpy(), y.numpy()) for x, y in lists]
    assert len(streamed) == len(expected) == 2 * report.batches_per_epoch
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(streamed, expected))
    assert position.windows_per_epoch == 1 and position.exhausted(len(streamed))
    estimate = estimate_epoch(scan, TOKENIZER, TOKENIZER, **SHAPES)
    assert estimate.exact and estimate.batches_per_epoch == report.batches_per_epoch
    assert (estimate.kept, estimate.over_long, estimate.batch_shapes) == (report.kept, report.over_long,
                                                                         report.batch_shapes)


def test_windows_of_a_larger_corpus_train_every_pair_once_an_epoch_in_a_new_order(tmp_path):
    sources = words(3000)
    first = write(tmp_path / "a.tsv.gz", pair_lines(sources[:1800]), compress=True)
    second = write(tmp_path / "b.tsv", pair_lines(sources[1800:]))
    scan = scan_corpus([first, second], cache_dir=tmp_path)
    batches, position = stream(scan, epochs=2, shuffle_buffer=700, max_length=24, token_budget=120)
    assert position.windows_per_epoch == 4, "1,024-line chunks, one a window: 2 chunks a file"
    per_epoch = sum(count for (epoch, _), count in position._windows.items() if epoch == 0)
    epochs = [rows(batches[:per_epoch]), rows(batches[per_epoch:])]
    expected = sorted((tuple(source), tuple(target + [2])) for source, target in zip(
        token_lists(sources), token_lists([s[::-1] for s in sources])))
    assert sorted(epochs[0]) == sorted(epochs[1]) == expected, "every pair, gzip or not, once an epoch"
    assert epochs[0] != epochs[1]


@pytest.mark.e2e
@pytest.mark.parametrize("buffer", [700, 100_000])
def test_a_pipeline_started_where_a_run_stopped_streams_the_rest_of_the_uninterrupted_run(tmp_path, buffer):
    path = write(tmp_path / "p.tsv", pair_lines(words(3000)))
    scan = scan_corpus([path], cache_dir=tmp_path)
    whole, position = stream(scan, epochs=2, shuffle_buffer=buffer)
    counts = list(position._windows.values())
    boundaries = np.cumsum(counts)
    for stopped in sorted({1, 37, int(boundaries[0]), int(boundaries[0]) + 1, len(whole) - 1}):
        place = position.where(stopped)
        resumed = TrainingPosition()
        resumed.start_at(stopped, *place)
        rest, _ = stream(scan, resumed, epochs=2, shuffle_buffer=buffer)
        assert len(rest) == len(whole) - stopped, (stopped, place)
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(rest, whole[stopped:]))
        assert resumed.where(len(whole)) == (2, 0, 0) and resumed.exhausted(len(whole))
        assert not resumed.exhausted(len(whole) - 1)
    assert position.data_epochs(len(whole)) == 2.0 and 0.9 < position.data_epochs(len(whole) // 2) < 1.1


def test_workers_stream_disjoint_halves_of_the_lines(tmp_path):
    sources = words(3000)
    path = write(tmp_path / "p.tsv", pair_lines(sources))
    scan = scan_corpus([path], cache_dir=tmp_path)
    shares = [rows(stream(scan, shard=(2, worker), max_length=24)[0]) for worker in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 1500, "every other line"
    assert not set(shares[0]) & set(shares[1])
    assert len(set(shares[0]) | set(shares[1])) == len(sources)


def test_workers_share_the_training_lines_evenly_when_every_tenth_line_validates(tmp_path):
    """Held-out lines (0, 10, 20, ...) are all even: workers taking every
    other line by number would get 3 of every 8 and 5 of every 8 of the rest."""
    sources = words(400)
    path = write(tmp_path / "p.tsv", pair_lines(sources))
    scan = scan_corpus([path], hold_out=HoldOut(every=10, limit=40), cache_dir=tmp_path)
    shares = [rows(stream(scan, shard=(2, worker), max_length=24)[0]) for worker in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 180
    assert not set(shares[0]) & set(shares[1]) and len(set(shares[0]) | set(shares[1])) == 360


def test_held_out_lines_never_train(tmp_path):
    sources = words(500)
    path = write(tmp_path / "p.tsv", pair_lines(sources))
    scan = scan_corpus([path], hold_out=HoldOut(every=50, limit=3), cache_dir=tmp_path)
    sources_trained = [source for source, _ in rows(stream(scan, max_length=24)[0])]
    padded = tf.ragged.constant(sources_trained, tf.int32).to_tensor()  # PAD, which detokenize drops
    trained = {text.decode() for text in TOKENIZER.detokenize(padded).numpy()}
    assert set(scan.valid[0]) == {sources[0], sources[50], sources[100]}
    assert not trained & set(scan.valid[0]) and len(trained) == len(sources) - 3


def test_the_graph_drops_the_lines_the_scan_counts_as_bad_and_normalizes_as_the_exports(tmp_path):
    lines = ["a  b\tc", "no tab", "x\ty\tz", "\t", " \tq", "d\te\r", "\ufeffbom\tmob", "cre\u0301e\tf"]
    path = write(tmp_path / "p.tsv", lines)
    scan = scan_corpus([path], cache_dir=tmp_path)
    tokenizer = CharacterTokenizer(LETTERS + "\xe9")
    position = TrainingPosition()
    dataset = streamed_pair_dataset(scan, tokenizer, tokenizer, position, **SHAPES, shuffle=False)
    sources = sorted(text.decode() for x, _ in dataset for text in tokenizer.detokenize(x["source_ids"]).numpy())
    assert scan.pairs == len(sources) == 4
    assert sources == sorted(scan.sample[0]) == ["a b", "bom", "cr\xe9e", "d"]


@pytest.mark.parametrize("remainder", ["keep", "drop", "pad"])
def test_window_batches_are_the_batches_of_tf_datas_bucket_by_sequence_length(remainder):
    """The whole-window batching against tf.data's per-pair op, on shuffled
    pairs of many lengths: the same batches, in the same order."""
    from kseq.data.bucketing import bucket_batch_sizes, default_boundaries, window_batches
    from kseq.data.text_pairs import add_specials

    sources = words(700, seed=5)
    targets = [s[::-1] + s[: len(s) // 2] for s in sources]
    source_ids, target_ids = TOKENIZER.tokenize(sources), TOKENIZER.tokenize(targets)
    boundaries = default_boundaries(40)
    sizes = bucket_batch_sizes(boundaries, 120)
    order = np.random.default_rng(1).permutation(len(sources))
    drop, pad = remainder == "drop", remainder == "pad"
    ours = window_batches(source_ids, target_ids, boundaries, sizes, drop, pad, order=tf.constant(order))

    def with_specials(source, target):
        decoder_input, labels = add_specials(tf.RaggedTensor.from_tensor(target[None]))
        return source, decoder_input[0], labels[0]

    pairs = tf.data.Dataset.from_tensor_slices((tf.gather(source_ids, order), tf.gather(target_ids, order)))
    theirs = pairs.map(with_specials).bucket_by_sequence_length(
        lambda s, d, l: tf.maximum(tf.shape(s)[0], tf.shape(d)[0]), boundaries, sizes + [1],
        padded_shapes=([None], [None], [None]), pad_to_bucket_boundary=True, drop_remainder=drop)
    theirs = [(s.numpy(), d.numpy(), l.numpy()) for s, d, l in theirs]
    ours = [(x["source_ids"].numpy(), x["target_ids"].numpy(), y.numpy()) for x, y in ours]
    if pad:  # tf.data leaves remainders short; ours gain all-PAD rows to the bucket's batch size
        assert all(not part[len(short[0]):].any() for batch, short in zip(ours, theirs) for part in batch)
        ours = [tuple(part[: len(short[0])] for part in batch) for batch, short in zip(ours, theirs)]
    assert len(ours) == len(theirs) > 20
    assert all(all(np.array_equal(a, b) for a, b in zip(mine, other)) for mine, other in zip(ours, theirs))


def test_a_window_that_holds_the_epoch_is_tokenized_once_for_every_epoch(tmp_path):
    from kseq.data.streaming import streamed_examples

    lines = [f"line {i}" for i in range(3000)]
    scan = scan_corpus([write(tmp_path / "t.txt", lines)], cache_dir=tmp_path, fields=1)
    chunks = []

    def examples(raw):  # counts the chunks it is asked to tokenize
        counted = tf.py_function(lambda size: chunks.append(int(size)) or size, [tf.size(raw)], tf.int32)
        with tf.control_dependencies([counted]):
            return (tf.identity(raw),)

    for buffer, expected_chunks in ((100_000, 3), (1000, 9)):
        chunks.clear()
        dataset = streamed_examples(scan, TrainingPosition(), examples, lambda window: tf.constant(1, tf.int64),
                                    lambda window, order: tf.data.Dataset.from_tensors(tf.gather(window[0], order)),
                                    shuffle_buffer=buffer, epochs=3, seed=1)
        epochs = [batch.numpy() for batch in dataset]
        assert len(chunks) == expected_chunks, "1,024-line chunks: once in all with one window, else each epoch"
        if buffer > len(lines):
            assert [sorted(epoch.tolist()) for epoch in epochs] == [sorted(line.encode() for line in lines)] * 3
            assert len({tuple(epoch[:5]) for epoch in epochs}) == 3, "each epoch in its own order"
