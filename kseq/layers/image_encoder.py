"""A convolutional image encoder that keeps the grid of features."""

import keras
from keras import ops

from kseq._validation import check_positive_int


@keras.saving.register_keras_serializable("kseq")
class ImageEncoder(keras.layers.Layer):
    """Images -> a (B, H', W', D) grid of feature vectors, one per region.

    Either a small CNN of keras layers (`filters`: one 3x3 convolution of
    stride 2 per entry, then one 3x3 convolution of stride 1 that widens
    each cell's view; 64x64 images with three entries give an 8x8 grid), or
    a `keras.applications` backbone chosen by name (`backbone="MobileNetV2"`,
    "ResNet50", ...) without its classifier and with random weights (nothing
    is downloaded). A learned embedding of each cell's position is added to
    its features: regions look alike wherever they are, and a decoder that
    attends over the grid must still know where it looks.

    Args:
        filters: the CNN's widths, one stride-2 stage each. Defaults to
            (32, 64, 128).
        backbone: None (the CNN), or the name of a `keras.applications`
            model (its `include_top=False` features).

    Call arguments:
        images: (B, H, W, 3) float images in [0, 1] (static H and W).
        training: whether batch normalisation (of a backbone) trains.

    Returns:
        (B, H', W', D) features, D = `filters[-1]` for the CNN.

    Example:
    >>> encoder = ImageEncoder(filters=(8, 16))
    >>> tuple(encoder(keras.ops.zeros((2, 32, 32, 3))).shape)
    (2, 8, 8, 16)
    """

    def __init__(self, filters=(32, 64, 128), backbone=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(filters, (list, tuple)) or not filters:
            raise ValueError(f"`filters` must be a non-empty list of widths; got {filters!r}.")
        self.filters = tuple(check_positive_int("filters", width) for width in filters)
        if backbone is not None and not hasattr(keras.applications, str(backbone)):
            raise ValueError(
                f"`backbone` must be None or the name of a keras.applications model (e.g. "
                f"'MobileNetV2', 'ResNet50'); got {backbone!r}."
            )
        self.backbone = backbone
        self.convolutions = [] if backbone else [
            keras.layers.Conv2D(width, 3, strides=2, padding="same", activation="relu",
                                dtype=self.dtype_policy, name=f"conv_{i}")
            for i, width in enumerate(self.filters)
        ] + [keras.layers.Conv2D(self.filters[-1], 3, padding="same", activation="relu",
                                 dtype=self.dtype_policy, name=f"conv_{len(self.filters)}")]

    def build(self, images_shape):
        height, width = images_shape[1], images_shape[2]
        if height is None or width is None:
            raise ValueError(f"ImageEncoder needs a static image size; got images of shape {tuple(images_shape)}.")
        if self.backbone:
            # keras.applications checks the input size (e.g. >= 32x32) by name.
            self.network = getattr(keras.applications, self.backbone)(
                include_top=False, weights=None, input_shape=(height, width, images_shape[3]))
            shape = self.network.output_shape
        else:
            shape = tuple(images_shape)
            for convolution in self.convolutions:
                convolution.build(shape)
                shape = convolution.compute_output_shape(shape)
        self.grid_shape = (shape[1], shape[2])
        self.output_dim = shape[3]
        self.position_embedding = self.add_weight(
            name="position_embedding", shape=(shape[1], shape[2], shape[3]),
            initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.built = True

    def call(self, images, training=None):
        if self.backbone:
            x = self.network(images * 2.0 - 1.0, training=training)  # [-1, 1], as most backbones expect
        else:
            x = images
            for convolution in self.convolutions:
                x = convolution(x)
        return x + ops.cast(self.position_embedding, x.dtype)[None]

    def compute_output_shape(self, images_shape):
        return (images_shape[0], *self.grid_shape, self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"filters": list(self.filters), "backbone": self.backbone})
        return config
