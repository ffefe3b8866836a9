"""How long deleting a tf.data iterator takes while the CPU is busy, with the
autotuning model on and off.

An iterator of a dataset with autotuning (tf.data's default) runs a thread
that tunes the pipeline in rounds, waiting longer between rounds as the
iterator lives on (up to a minute). Deleting the iterator cancels that
thread and waits for it; on a busy CPU the thread can miss the cancellation
and sleep out its round, and the deletion (in whichever thread the garbage
collector ran) waits with it. This script loads every core with busy
processes, then creates, reads, idles and deletes iterators, and prints the
deletion times.

    .venv/bin/python benchmarks/iterator_deletion.py
"""

import argparse
import gc
import json
import multiprocessing
import os
import time

import tensorflow as tf


def busy():
    while True:
        pass


def deletion_seconds(autotune, count, idle):
    """Seconds each of `count` deletions took, each iterator idle `idle` s first."""
    options = tf.data.Options()
    options.autotune.enabled = autotune
    dataset = tf.data.Dataset.range(10**9).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.prefetch(tf.data.AUTOTUNE).with_options(options)
    seconds = []
    for _ in range(count):
        iterator = iter(dataset)
        for _ in range(20):
            next(iterator)
        time.sleep(idle)
        start = time.perf_counter()
        del iterator
        gc.collect()
        seconds.append(time.perf_counter() - start)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=60, help="iterators deleted per setting")
    parser.add_argument("--idle", type=float, default=1.5, help="seconds each iterator idles before deletion")
    args = parser.parse_args()
    load = [multiprocessing.Process(target=busy, daemon=True) for _ in range(os.cpu_count())]
    for process in load:
        process.start()
    try:
        for autotune in (True, False):
            seconds = deletion_seconds(autotune, args.count, args.idle)
            print(json.dumps({"autotune": autotune, "deletions": len(seconds), "max_s": round(max(seconds), 2),
                              "over_1s": sum(s > 1 for s in seconds), "total_s": round(sum(seconds), 1)}),
                  flush=True)
    finally:
        for process in load:
            process.terminate()


if __name__ == "__main__":
    main()
