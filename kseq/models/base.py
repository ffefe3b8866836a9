"""What every kseq model shares."""

import keras

from kseq._compat import FirstShardBuild, OptimizerBuiltBeforeTracing
from kseq.models.checked_weights import CheckedWeightLoading
from kseq.special_ids import NUM_SPECIAL_IDS
from kseq._validation import as_id_array, check_positive_int


class KseqModel(CheckedWeightLoading, FirstShardBuild, OptimizerBuiltBeforeTracing, keras.Model):
    """Base of kseq's models.

    - `length_limit`: the longest sequence the model accepts (None: no
      limit); generation and exports cut to it.
    - Calls take nested Python lists too, as int arrays, with an error that
      names the input when rows differ in length (keras would reject lists
      before `call` could explain).
    - No default SavedModel signature: keras would trace `call` with float32
      inputs; kseq.export writes the real, string-in signatures.
    - `get_config`: keras' (name, trainable and the dtype policy, which a
      mixed-precision model keeps through `.keras` files) plus every
      constructor argument named in `config_names`.
    - `load_weights` of another model's `.keras` file names the difference
      (CheckedWeightLoading); first-batch builds work under a strategy with
      uneven shards (kseq._compat.FirstShardBuild).
    - The first `fit` without a strategy traces the train step once, not
      twice: the optimizer is built before it traces
      (kseq._compat.OptimizerBuiltBeforeTracing).
    """

    config_names = ()
    length_limit = None
    input_name = "token_ids"  # how errors name a call's single input

    @property
    def _default_save_signature(self):
        return None

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, dict):
            inputs = {name: as_id_array(value, name) for name, value in inputs.items()}
        else:
            inputs = as_id_array(inputs, self.input_name)
        return super().__call__(inputs, *args, **kwargs)

    def _ensure_built(self):
        """Builds the model for entry points that do not go through __call__,
        under the strategy it was made in (`fit` runs its entry points outside
        the scope, and variables made there would not be mirrored)."""
        if not self.built:
            with self.distribute_strategy.scope():
                self.build()

    def get_config(self):
        return {**super().get_config(), **{name: getattr(self, name) for name in self.config_names}}


def check_vocab_size(name, value):
    """Checks a vocabulary size: an int over the special ids 0-3.

    Args:
        name: the argument's name, for the message.
        value: the vocabulary size V.

    Returns:
        `value`, checked.

    Raises:
        ValueError: if `value` is not a positive int, or is 4 or less.
    """
    value = check_positive_int(name, value)
    if value <= NUM_SPECIAL_IDS:
        raise ValueError(
            f"`{name}` must be > {NUM_SPECIAL_IDS}: ids 0-3 are PAD, BOS, EOS "
            f"and UNK; got {value}."
        )
    return value
