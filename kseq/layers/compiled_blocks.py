"""A stack's Transformer blocks run through one XLA-compiled function
(`TransformerSeq2Seq(compiled_blocks=True)`, `kseq-train --jit-compile blocks`).

XLA compiled a whole train step in minutes on a GPU, most of it spent on
fusions that repeat once a layer. Here the function takes a block's weights
as arguments and runs the stack's first block as a template over them
(keras' `StatelessScope` reads the given values in place of the template's
variables), so every block of the stack calls the same function: XLA
compiles it once forward and once backward, whatever the depth. The step
around the blocks stays uncompiled, so under a tf.distribute strategy each
replica calls the compiled function on its own copies.

Dropout inside the function comes from the step's one Philox key, passed in
with the block's stream (`StepDropout.stream_of`). XLA's Philox turns a key
and counter into other bits than TensorFlow's kernel does, so the masks are
other draws than the uncompiled path's, with the same keep probability.
"""

import keras
import tensorflow as tf

from kseq.layers.dropout import StepDropout


class CompiledBlocks:
    """Runs the training passes of one stack's blocks through one compiled function.

    Args:
        template: the stack's first block (built); every block run must
            have its structure (class, sublayers, weight shapes).

    Example:
    >>> from kseq.layers.transformer_encoder_block import TransformerEncoderBlock
    >>> blocks = [TransformerEncoderBlock(num_heads=2, ff_dim=8, dropout=0.0) for _ in range(2)]
    >>> for block in blocks:
    ...     block.build((None, None, 4))
    >>> compiled = CompiledBlocks(blocks[0])
    >>> tuple(compiled(blocks[1], (keras.ops.ones((2, 3, 4)),)).shape)
    (2, 3, 4)
    """

    def __init__(self, template) -> None:
        self.template = template
        self._variables = list(template.trainable_variables)
        self._function = tf.function(self._run, jit_compile=True, reduce_retracing=True)

    def __call__(self, block, inputs, step_dropout=None, stream=0):
        """Runs `block` on `inputs` as in training, through the compiled function.

        Args:
            block: a block of the template's structure.
            inputs: the block's positional call arguments (tensors), e.g.
                (x, padding_mask).
            step_dropout: the step's `StepDropout`, or None for no dropout.
            stream: the block's dropout stream (an int). Defaults to 0.

        Returns:
            The block's outputs.

        Raises:
            ValueError: `block`'s weights differ in number or shape from the template's.
        """
        # Read here, as tensors: under a tf.distribute strategy a variable passed
        # in (what `.value` gives where keras does not autocast it) was read as
        # the first block's, so the other blocks ran with its weights and got
        # no gradient (tests/layers/test_compiled_blocks.py).
        values = [tf.convert_to_tensor(variable.value) for variable in block.trainable_variables]
        if [tuple(v.shape) for v in values] != [tuple(v.shape) for v in self._variables]:
            raise ValueError(f"block {block.name!r} has other weights than the compiled template "
                             f"{self.template.name!r}: a stack's blocks must share one structure.")
        key = None if step_dropout is None else step_dropout.key
        return self._function(values, tuple(inputs), key, tf.constant(stream, tf.int64))

    def _run(self, values, inputs, key, stream):
        dropout = None if key is None else StepDropout(None, key=key, stream=stream)
        with keras.StatelessScope(state_mapping=list(zip(self._variables, values))):
            return self.template(*inputs, training=True, step_dropout=dropout)
