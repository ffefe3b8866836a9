"""A language model's streams read from files (kseq.data.streams.
streamed_stream_batches): one window gives the batches of the in-memory
streams, several give each window's, and a resumed pipeline streams exactly
the rest."""

import random
import string

import numpy as np

from kseq.data import CharacterTokenizer
from kseq.data.corpus import HoldOut, scan_corpus
from kseq.data.streams import join_documents, stream_batches, streamed_stream_batches
from kseq.training.checkpoints.resume import TrainingPosition

TOKENIZER = CharacterTokenizer(string.ascii_lowercase + " ")


def documents(count, seed=0):
    rng = random.Random(seed)
    return [" ".join("".join(rng.choices("abcde", k=rng.randint(1, 5))) for _ in range(rng.randint(1, 6)))
            for _ in range(count)]


def write(path, lines):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


def as_arrays(dataset):
    return [(x.numpy(), y.numpy()) for x, y in dataset]


def in_memory(docs, batch_size=4, chunk_length=7):
    return as_arrays(stream_batches(join_documents(TOKENIZER.tokenize(docs)), batch_size, chunk_length,
                                    drop_remainder=True))


def streamed(scan, position=None, window_lines=100_000, epochs=1):
    position = position or TrainingPosition()
    dataset = streamed_stream_batches(scan, TOKENIZER, position, 4, 7, window_lines=window_lines, epochs=epochs)
    return as_arrays(dataset), position


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, u) and np.array_equal(y, v) for (x, y), (u, v) in zip(a, b))


def test_one_window_streams_the_batches_of_the_in_memory_streams_without_the_lines_the_scan_counts_bad(tmp_path):
    docs = documents(300)
    lines = [doc.encode() for doc in docs]
    lines[3:3] = [b"   ", b"\xff\xfe not utf-8", b""]
    scan = scan_corpus([write(tmp_path / "t.txt", lines)], cache_dir=tmp_path, fields=1)
    assert scan.bad == 3 and scan.sample[0] == docs
    batches, position = streamed(scan, epochs=2)
    expected = in_memory(docs)
    assert same(batches, expected + expected), "every epoch the same streams, in order"
    assert position.windows_per_epoch == 1 and sum(position._windows.values()) == 2 * len(expected)


def test_each_window_is_cut_into_its_own_streams_and_held_out_lines_never_train(tmp_path):
    docs = documents(3000)
    path = write(tmp_path / "t.txt", [doc.encode() for doc in docs])
    scan = scan_corpus([path], cache_dir=tmp_path, fields=1, hold_out=HoldOut(every=50, limit=10))
    held = set(range(0, 500, 50))
    assert scan.valid[0] == [docs[i] for i in sorted(held)]
    batches, position = streamed(scan, window_lines=1024)
    windows = [[doc for i, doc in enumerate(docs[start:start + 1024], start) if i not in held]
               for start in range(0, len(docs), 1024)]
    assert position.windows_per_epoch == len(windows) == 3
    assert same(batches, sum((in_memory(window) for window in windows), []))


def test_a_pipeline_started_where_a_run_stopped_streams_the_rest_of_the_uninterrupted_run(tmp_path):
    scan = scan_corpus([write(tmp_path / "t.txt", [doc.encode() for doc in documents(2500)])], cache_dir=tmp_path,
                       fields=1)
    whole, position = streamed(scan, window_lines=1024, epochs=2)
    first = position._windows[0, 0]
    for stopped in (1, first, first + 5, len(whole) - 1):
        resumed = TrainingPosition()
        resumed.start_at(stopped, *position.where(stopped))
        rest, _ = streamed(scan, resumed, window_lines=1024, epochs=2)
        assert same(rest, whole[stopped:]), stopped
