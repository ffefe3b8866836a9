"""Fixed sinusoidal position encodings of "Attention Is All You Need"."""

import keras
from keras import ops

from kseq._shapes import dynamic_shape
from kseq._validation import check_choice

LAYOUTS = ("interleaved", "halves")


@keras.saving.register_keras_serializable("kseq")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Sinusoidal position encodings, interleaved sin/cos as in the paper.

    PE[p, 2i] = sin(p / max_wavelength^(2i/D)) and
    PE[p, 2i+1] = cos(p / max_wavelength^(2i/D)), positions p counted from
    `start_index`. With `layout="halves"` the same sines fill the first
    half of the vector and the cosines the second (Marian's layout, which
    OPUS-MT models were trained with): PE[p, i] = sin(p / max_wavelength^(2i/D))
    and PE[p, D/2 + i] = cos(p / max_wavelength^(2i/D)) for i < D/2 (D even).
    Computed in float32, returned in the layer's compute dtype. The
    encodings are returned, not added to the inputs.

    Args:
        max_wavelength: the longest wavelength, 10000 in the paper.
        layout: "interleaved" (the paper's, default) or "halves" (Marian's).

    Call arguments:
        inputs: (B, T, D) tensor; only its shape is used.
        start_index: position of the first step (int or scalar tensor), for
            step-by-step decoding. Defaults to 0.

    Returns:
        (B, T, D) encodings.

    Example:
    >>> x = keras.ops.zeros((2, 5, 8))
    >>> tuple(SinusoidalPositionEncoding()(x).shape)
    (2, 5, 8)

    References:
        Vaswani et al., 2017, "Attention Is All You Need", section 3.5.
    """

    def __init__(self, max_wavelength: float = 10000, layout: str = "interleaved", **kwargs) -> None:
        super().__init__(**kwargs)
        if max_wavelength <= 0:
            raise ValueError(
                f"`max_wavelength` must be positive; got {max_wavelength}."
            )
        self.max_wavelength = max_wavelength
        self.layout = check_choice("layout", layout, LAYOUTS)
        self.built = True

    def call(self, inputs, start_index=0):
        shape = dynamic_shape(inputs)
        length, depth = shape[-2], shape[-1]
        positions = ops.cast(ops.arange(length), "float32") + ops.cast(
            start_index, "float32"
        )
        dims = ops.arange(depth)
        if self.layout == "interleaved":
            even_dims = ops.cast(dims - dims % 2, "float32")  # 2i for both 2i, 2i+1
            is_sine = dims % 2 == 0
        else:  # dimension i and D/2 + i share the frequency of 2i
            half = (depth + 1) // 2
            even_dims = ops.cast(2 * (dims % half), "float32")
            is_sine = dims < half
        inverse_freq = ops.power(
            ops.cast(self.max_wavelength, "float32"),
            -even_dims / ops.cast(depth, "float32"),
        )
        angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_freq, 0)
        encoding = ops.where(is_sine, ops.sin(angles), ops.cos(angles))
        encoding = ops.broadcast_to(encoding, shape)
        return ops.cast(encoding, self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength, "layout": self.layout})
        return config
