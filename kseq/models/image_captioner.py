"""One-to-many from an image: a CNN encoder and a recurrent decoder, with or without attention."""

import keras
import tensorflow as tf
from keras import ops

from kseq._compat import is_empty_batch
from kseq._validation import as_id_array, check_choice, check_positive_int, check_token_ids
from kseq.decoding.state import gather_beams
from kseq.layers.image_encoder import ImageEncoder
from kseq.layers.recurrent import num_states
from kseq.layers.rnn_decoder import RNNDecoder
from kseq.models.base import KseqModel, check_vocab_size
from kseq.models.generator import Generator
from kseq.special_ids import BOS_ID

POOLINGS = ("average", "flatten")


@keras.saving.register_keras_serializable("kseq")
class ImageCaptioner(Generator, KseqModel):
    """Image captioning: an `ImageEncoder` grid of features and an `RNNDecoder`.

    The encoder turns each image into an H'xW' grid of feature vectors (the
    decoder's memory, S = H'W' cells) and one vector z: their average
    (`pooling="average"`, which keeps what is there but not where) or a
    learned projection of the whole grid (`pooling="flatten"`, which keeps
    both). z sets every decoder layer's initial state through tanh(W z + b)
    and, with `peeky=True`, joins every step's input and the output
    features. Without attention, z is all the decoder sees of the image
    ("Show and Tell"); with `attention` ("dot", "general", "concat": Luong;
    "bahdanau") the decoder attends over the grid cells at every step ("Show,
    Attend and Tell"), with kseq's attention layers. Training is
    teacher-forced: `target_ids` starts with BOS and the labels are the
    targets shifted left, ending with EOS.

    `generate(images, ...)` captions a batch with any kseq search (greedy,
    beam, sample); `generate_with_attention` also returns each generated
    word's attention over the grid. Through the decoder protocol
    (`begin_decoding`, `search`) images travel as (B, S) int32 ids, which
    `pack_images` makes.

    Args:
        vocab_size: V, output token ids (0-3 are PAD, BOS, EOS, UNK).
        image_size: the images' height and width. Defaults to 64.
        filters, backbone: the `ImageEncoder`'s CNN widths, or a
            `keras.applications` model by name. Default: (32, 64, 128), None.
        embed_dim: E, token embedding width. Defaults to 256.
        units: U, hidden size of every recurrent layer. Defaults to 256.
        cell: "rnn", "lstm" or "gru". Defaults to "lstm".
        num_layers: stacked recurrent layers. Defaults to 1.
        attention: None, "dot", "general", "concat" or "bahdanau".
        peeky: feed z to every step and to the output layer. Defaults to False.
        pooling: "average" or "flatten", how z is made. Defaults to "average".
        dropout: rate on the token embeddings and between stacked layers.

    Call arguments:
        inputs: {"images": (B, H, W, 3) float in [0, 1] or uint8,
            "target_ids": (B, T) int}, or the pair (images, target_ids).
        training: whether dropout is active.

    Returns:
        (B, T, V) logits of the next token at every position.

    Example:
    >>> model = ImageCaptioner(20, image_size=16, filters=(4,), embed_dim=8, units=8,
    ...                        attention="general")
    >>> images = np.zeros((2, 16, 16, 3), "uint8")
    >>> tuple(model({"images": images, "target_ids": np.array([[1, 5, 6], [1, 7, 0]])}).shape)
    (2, 3, 20)
    >>> out = model.generate_with_attention(images, max_length=4)
    >>> tuple(out["attention"].shape) == tuple(out["ids"].shape) + (8, 8)
    True

    References:
        Vinyals et al., 2015 ("Show and Tell"); Xu et al., 2015 ("Show,
        Attend and Tell": attention over a CNN grid, initial state from the
        mean of the grid); Karpathy and Fei-Fei, 2015.
    """

    config_names = ("vocab_size", "image_size", "filters", "backbone", "embed_dim", "units", "cell",
                    "num_layers", "attention", "peeky", "pooling", "dropout")
    output_vocab_name = "vocab_size"
    input_name = "images"

    def __init__(self, vocab_size: int, image_size: int = 64, filters: tuple[int, ...] = (32, 64, 128),
                 backbone: str | None = None, embed_dim: int = 256,
                 units: int = 256, cell: str = "lstm", num_layers: int = 1, attention: str | None = None,
                 peeky: bool = False, pooling: str = "average",
                 dropout: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.vocab_size = check_vocab_size("vocab_size", vocab_size)
        self.image_size = check_positive_int("image_size", image_size)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        policy = self.dtype_policy
        self.encoder = ImageEncoder(filters, backbone, dtype=policy, name="encoder")
        self.filters, self.backbone = list(self.encoder.filters), backbone
        # The decoder checks cell, units, num_layers, attention and dropout by name.
        self.decoder = RNNDecoder(cell=cell, units=units, num_layers=num_layers, attention=attention,
                                  peeky=peeky, dropout=dropout, dtype=policy, name="decoder")
        self.units, self.cell, self.num_layers = self.decoder.units, cell, self.decoder.num_layers
        self.attention, self.peeky, self.dropout = attention, self.decoder.peeky, self.decoder.dropout
        self.pool = keras.layers.Dense(self.units, activation="tanh", dtype=policy, name="pool") \
            if pooling == "flatten" else None
        self.embedding = keras.layers.Embedding(vocab_size, embed_dim, dtype=policy, name="embedding")
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=policy)
        self.bridges = [
            [keras.layers.Dense(self.units, activation="tanh", dtype=policy, name=f"bridge_{i}_{j}")
             for j in range(num_states(cell))]
            for i in range(self.num_layers)
        ]
        self.output_projection = keras.layers.Dense(vocab_size, dtype=policy, name="output_projection")

    @property
    def output_vocab_size(self):
        return self.vocab_size

    @property
    def has_attention(self):
        return self.attention is not None

    @property
    def grid_shape(self):
        """The encoder's grid (H', W'), over which the attention weights lie."""
        self._ensure_built()
        return self.encoder.grid_shape

    def build(self, inputs_shape=None):
        self.encoder.build((None, self.image_size, self.image_size, 3))
        grid, width = self.encoder.grid_shape, self.encoder.output_dim
        cells = grid[0] * grid[1]
        if self.pool is not None:
            self.pool.build((None, cells * width))
        z_width = self.units if self.pool is not None else width
        for layer_bridges in self.bridges:
            for bridge in layer_bridges:
                bridge.build((None, z_width))
        self.embedding.build((None, None))
        self.decoder.build(
            (None, None, self.embed_dim),
            memory_shape=(None, cells, width) if self.attention else None,
            context_shape=(None, z_width) if self.peeky else None,
        )
        self.output_projection.build((None, None, self.decoder.output_dim))
        self.built = True

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, tuple) and len(inputs) == 2:  # what fit passes for (x1, x2) data
            inputs = {"images": inputs[0], "target_ids": inputs[1]}
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None):
        images, target_ids = self._split_inputs(inputs)
        if is_empty_batch(target_ids):  # (0, T, V)
            return ops.zeros((0, target_ids.shape[1], self.vocab_size), self.compute_dtype)
        x = self.embedding_dropout(self.embedding(target_ids), training=training)
        features = self.decoder(x, training=training, **self._decoder_args(self.encode(images, training)))
        return self.output_projection(features)

    # The image --------------------------------------------------------------

    def check_images(self, images, name="images"):
        """Checks a batch of images and gives them as float32 pixels in [0, 1].

        uint8 and other integer images are divided by 255.

        Args:
            images: (B, H, W, 3) RGB images of the model's `image_size`.
            name: the argument's name, for messages. Defaults to "images".

        Returns:
            (B, H, W, 3) float32 images.

        Raises:
            ValueError: if `images` is ragged or sparse, not (B, size, size, 3),
                or of a dtype that is neither float nor integer.
        """
        if isinstance(images, (tf.RaggedTensor, tf.SparseTensor)):
            raise ValueError(f"`{name}` must be a dense tensor; got a {type(images).__name__}.")
        images = as_id_array(images, name)
        if not hasattr(images, "dtype"):
            raise ValueError(f"`{name}` must be an array or tensor; got {type(images).__name__}.")
        dtype, shape = keras.backend.standardize_dtype(images.dtype), tuple(images.shape)
        size = self.image_size
        expected = f"images of shape (batch, {size}, {size}, 3)"
        if len(shape) != 4 or shape[-1] != 3:
            raise ValueError(f"`{name}` must hold {expected} (RGB); got shape {shape}.")
        if any(side is not None and side != size for side in shape[1:3]):
            raise ValueError(f"`{name}` must hold {expected} (image_size={size}); got {shape[1]}x{shape[2]} "
                             "images: resize them first.")
        if dtype == "uint8":  # the op kseq.export's image decoding uses, for equal pixels
            return tf.image.convert_image_dtype(images, tf.float32)
        if "int" in dtype:
            return ops.cast(images, "float32") / 255.0
        if not dtype.startswith(("float", "bfloat")):
            raise ValueError(f"`{name}` must hold float (in [0, 1]) or uint8 pixels; got dtype {dtype}.")
        return ops.cast(images, "float32")

    def pack_images(self, images, name="images"):
        """Packs images as the (B, S) int32 ids that `begin_decoding` (hence `search`) reads.

        The ids are the images' float32 bits: generation is traced once for
        (B, S) int32 inputs, as for the other models.

        Args:
            images: images as `check_images` takes.
            name: the argument's name, for messages. Defaults to "images".

        Returns:
            (B, H*W*3) int32 ids.

        Raises:
            ValueError: as `check_images`.
        """
        images = self.check_images(images, name)
        return tf.reshape(tf.bitcast(images, tf.int32), [tf.shape(images)[0], -1])

    def _unpack_images(self, ids):
        size = self.image_size
        return tf.reshape(tf.bitcast(ids, tf.float32), [-1, size, size, 3])

    def encode(self, images, training=False):
        """Encodes images into the grid of features the decoder attends over, and a summary z.

        Args:
            images: (B, H, W, 3) float images, checked (`check_images`).
            training: whether dropout and batch statistics are in training
                mode. Defaults to False.

        Returns:
            {"grid": (B, S, D) features of the S = H' * W' cells, "z": (B, Z)
            the pooled vector that starts the decoder}.
        """
        self._ensure_built()
        features = self.encoder(ops.cast(images, self.compute_dtype), training=training)  # (B, H', W', D)
        shape = ops.shape(features)
        grid = ops.reshape(features, (shape[0], -1, self.encoder.output_dim))  # (B, S, D)
        if self.pool is None:
            z = ops.mean(grid, axis=1)
        else:
            z = self.pool(ops.reshape(grid, (shape[0], -1)))
        return {"grid": grid, "z": z}

    def _decoder_args(self, encoded):
        """Encoder outputs -> the decoder's initial_state/memory/context."""
        z = encoded["z"]
        return {
            "initial_state": [[bridge(z) for bridge in layer_bridges] for layer_bridges in self.bridges],
            "memory": encoded["grid"] if self.attention else None,  # every cell is real: no mask
            "context": z if self.peeky else None,
        }

    def _split_inputs(self, inputs):
        """Checks {"images", "target_ids"}; returns (images, target ids)."""
        if not isinstance(inputs, dict) or set(inputs) != {"images", "target_ids"}:
            got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                "Model inputs must be a dict with keys 'images' (B, H, W, 3) and 'target_ids' (B, T) "
                f"(or the pair (images, target_ids)); got {got}."
            )
        images = self.check_images(inputs["images"])
        target_ids = check_token_ids(inputs["target_ids"], "target_ids", self.vocab_size)
        batches = images.shape[0], target_ids.shape[0]
        if None not in batches and batches[0] != batches[1]:
            raise ValueError(
                f"`images` and `target_ids` must have the same batch size; got {batches[0]} and {batches[1]}."
            )
        return images, target_ids

    # The decoder protocol (kseq.decoding.Decoder) ---------------------------

    def _check_prompt(self, images):
        return self.pack_images(images)

    def begin_decoding(self, image_ids, max_length):
        """Starts decoding from packed images: the decoder state and BOS for every row.

        Args:
            image_ids: (B, S) packed images, from `pack_images`.
            max_length: unused: the recurrent state has fixed shapes.

        Returns:
            (state, start_tokens): {"rnn", and "memory"/"keys"/"memory_mask"
            with attention, "context" when peeky}, and (B,) int32 BOS ids.
        """
        state = self.decoder.initial_decoding_state(
            **self._decoder_args(self.encode(self._unpack_images(image_ids))))
        return state, tf.fill(tf.shape(image_ids)[:1], BOS_ID)

    def step_with_attention(self, token_ids, state, index):
        """Runs one decoding step, with its attention over the grid cells.

        Args:
            token_ids: (B,) the previous tokens.
            state: the decoding state.
            index: unused: the recurrent state knows the position.

        Returns:
            (logits, state, attention): (B, V) next-token logits, the new
            state, and (B, S) attention over the grid cells, or None without
            attention.
        """
        features, state, weights = self.decoder.step(self.embedding(token_ids), state)
        return self.output_projection(features), state, weights

    def reorder_state(self, state, indices):
        """Reorders what the steps change only: the grid and z are the same for every beam of a row.

        Args:
            state: the decoding state.
            indices: (R,) int32 rows to take.

        Returns:
            The state with its varying part reordered.
        """
        return dict(state, **gather_beams(self.decoder.varying_state(state), indices))

    # Attention over the image ------------------------------------------------

    def caption_attention(self, images, caption_ids):
        """Gives each caption token's attention over the image grid, at the step that emitted it.

        The searches run the same steps, so these are the weights each
        generated word was chosen with. A Python loop of T steps: for plots
        and checks of a few images.

        Args:
            images: (B, H, W, 3) images, as `check_images` takes.
            caption_ids: (B, T) int ids without BOS, e.g. `generate`'s output.

        Returns:
            (B, T, H', W') float32 weights, 0 after a row's EOS.

        Raises:
            ValueError: if the model has no attention, or the inputs are not
                valid images and ids.
        """
        if not self.has_attention:
            raise ValueError("caption_attention needs a model with `attention`; this one has attention=None.")
        caption_ids = check_token_ids(caption_ids, "caption_ids", self.vocab_size)
        packed = self.pack_images(images, "images")
        self._ensure_built()
        inputs = tf.concat([tf.fill([tf.shape(caption_ids)[0], 1], BOS_ID), caption_ids[:, :-1]], 1)
        weights = tf.cast(self.attention_by_steps(packed, inputs), tf.float32)  # (B, T, S)
        weights = tf.where(caption_ids[:, :, None] != 0, weights, 0.0)
        return tf.reshape(weights, [tf.shape(weights)[0], tf.shape(weights)[1], *self.grid_shape])

    def generate_with_attention(self, images, **options):
        """Captions images and gives each word's attention over the grid with it.

        Args:
            images: (B, H, W, 3) images, as `check_images` takes.
            **options: `generate`'s options (one hypothesis per row).

        Returns:
            {"ids": (B, T') `generate(images, **options)`, "attention":
            (B, T', H', W') each word's attention over the grid}.

        Raises:
            ValueError: if `return_scores` or `num_return` other than 1 is
                asked, or as `caption_attention`.
        """
        if options.get("return_scores") or options.get("num_return", 1) != 1:
            raise ValueError("generate_with_attention returns one caption per image: leave out "
                             "`return_scores` and `num_return`.")
        ids = self.generate(images, **options)
        return {"ids": ids, "attention": self.caption_attention(images, ids)}

    def attention_weights(self, inputs):
        """Gives the attention of each teacher-forced step over the grid cells.

        Args:
            inputs: {"images": (B, H, W, 3), "target_ids": (B, T) int ids
                starting with BOS}.

        Returns:
            (B, T, S) attention weights over the S grid cells.

        Raises:
            ValueError: if `inputs` is not such a dict, or the model has no attention.
        """
        images, target_ids = self._split_inputs(inputs)
        if not self.has_attention:
            raise ValueError("attention_weights needs a model with `attention`; this one has attention=None.")
        return self.attention_by_steps(self.pack_images(images), target_ids)
