"""A fix for keras' first-batch build under tf.distribute."""

import tensorflow as tf


class FirstShardBuild:
    """Mixin for keras models trained under a strategy with several replicas.

    keras 3.15 builds metrics from the first batch of `fit`/`evaluate` by
    averaging the replicas' shards, which fails when they differ in size (an
    odd bucketed batch) and turns int ids into floats. The first replica's
    shard has the same structure and dtypes, so that is what is used.
    """

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if strategy is not None and iterator is not None:
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda value: strategy.experimental_local_results(value)[0]
                    if isinstance(value, tf.distribute.DistributedValues) else value,
                    next(batches),
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
