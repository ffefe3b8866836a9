"""A translation task's input pipelines under its strategy: the training
pairs streamed from their files, each worker its own share of the lines and
of the token budget; the validation pairs in memory, distributed where the
strategy needs it."""

from kseq.data.bucketing import bucketed_pair_dataset, xla_boundaries
from kseq.data.streaming import estimate_epoch, streamed_pair_dataset
from kseq.errors import UsageError
from kseq.training.devices import distribute_batches, worker_batches, workers


def pair_pipelines(options, corpus, valid_pairs, tokenizer, *, xla, strategy, position, target_tokenizer=None):
    """Makes the training and validation pipelines of a translation task.

    The training pairs are streamed for all epochs from `position`; under
    XLA the batches take a few fixed shapes, remainders padded.

    Args:
        options: the task's options (--max-length, --token-budget,
            --shuffle-buffer, --seed, --epochs, --strategy).
        corpus: the training corpus, scanned once (`kseq.data.corpus.CorpusScan`).
        valid_pairs: (sources, targets) of the validation split.
        tokenizer: the joint tokenizer, or the sources' with `target_tokenizer`.
        xla: whether the train step (or its blocks) is compiled with XLA.
        strategy: the tf.distribute strategy.
        position: the `Fit`'s training position.
        target_tokenizer: the targets' tokenizer (a pretrained translator's
            own); None (default): `tokenizer`.

    Returns:
        (train dataset, valid dataset, the training pipeline's epoch report).

    Raises:
        UsageError: --token-budget leaves a worker less than --max-length.
    """
    shapes = dict(max_length=options.max_length)
    if xla:
        shapes.update(boundaries=xla_boundaries(options.max_length), pad_remainder=True)
    target_tokenizer = target_tokenizer or tokenizer
    count = workers(strategy)
    if options.token_budget // count < options.max_length:
        raise UsageError(f"--token-budget {options.token_budget} shared by {count} workers leaves each less than "
                         f"--max-length {options.max_length}: raise it to {count * options.max_length} or more")

    def train_shard(shard):
        return streamed_pair_dataset(
            corpus, tokenizer, target_tokenizer, position, token_budget=options.token_budget // count,
            shuffle_buffer=options.shuffle_buffer, seed=options.seed, epochs=options.epochs, shard=shard, **shapes)

    valid, valid_report = bucketed_pair_dataset(*valid_pairs, tokenizer, target_tokenizer, shuffle=False,
                                                token_budget=options.token_budget, **shapes)
    train = worker_batches(strategy, train_shard)
    if options.strategy == "multiworker":
        valid = distribute_batches(strategy, valid)
    report = estimate_epoch(corpus, tokenizer, target_tokenizer, token_budget=options.token_budget,
                            shuffle_buffer=options.shuffle_buffer, **shapes)
    print(f"train pipeline: {report}\nvalid pipeline: {valid_report}")
    return train, valid, report
