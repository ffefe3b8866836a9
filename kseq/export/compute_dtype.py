"""A model's weights stored in the dtype it computes in, for serving."""

from keras import ops


def in_compute_dtype(model):
    """Gives the model to serve: under a mixed policy, a copy with its weights stored in the compute dtype.

    A mixed policy has float32 weights and bfloat16 or float16 arithmetic.
    A mixed model casts every weight at every use: a search's step casts
    each kernel and the output table again, the step after too (a loop
    keeps them out of TensorFlow's constant folding). The copy computes the
    same products from weights cast once, and its SavedModel is half the
    size. Only LayerNorm scales and offsets, which kseq applies in float32,
    differ: rounded to the compute dtype.

    Args:
        model: a kseq model; built here if it is not.

    Returns:
        `model` itself where it computes in its weights' dtype, else the copy.

    Raises:
        ValueError: the copy rebuilt in the compute dtype holds other weights.
    """
    model._ensure_built()
    policy = model.dtype_policy
    if policy.compute_dtype == policy.variable_dtype:
        return model
    copy = type(model).from_config({**model.get_config(), "dtype": policy.compute_dtype})
    copy._ensure_built()
    if [_local(v.path) for v in copy.weights] != [_local(v.path) for v in model.weights]:
        raise ValueError(f"{type(model).__name__} rebuilt in {policy.compute_dtype} holds other weights than "
                         "the model; export it as it is.")
    for target, source in zip(copy.weights, model.weights):
        target.assign(ops.cast(source, target.dtype))
    return copy


def _local(path):
    """A weight's path without the model's own name."""
    return path.split("/", 1)[-1]
