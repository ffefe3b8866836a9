"""One matmul of decoding's shapes in float32, bfloat16 and int8 on this CPU.

The int8 route is oneDNN's `QuantizedMatMulWithBiasAndDequantize` (uint8
activations x int8 weights) after a dynamic `QuantizeV2` of the activations
(their maximum found each call, as a served model must), against weights
quantized once, symmetrically. The activations are non-negative, as after
a ReLU: oneDNN's kernel for signed activations (MIN_FIRST, which adds a bias
compensation) returned wrong values here, so this is int8's best case. Each
matmul runs `--repeats` times inside one `tf.function`, so the call's own
overhead is spread thin; each row prints microseconds a matmul and int8's
error relative to float32.

    .venv/bin/python benchmarks/int8_matmul.py
"""

import argparse
import json
import time

import tensorflow as tf

SHAPES = ((128, 192, 768), (128, 768, 192), (128, 192, 4000), (128, 512, 2048), (128, 512, 16000),
          (1024, 512, 2048))


def chained(matmul, repeats):
    """A tf.function running `matmul(x)` `repeats` times, each call made to
    depend on the last (so none is pruned or run in parallel)."""

    @tf.function
    def run(x):
        y = tf.zeros([1, 1], x.dtype)
        for _ in range(repeats):
            y = matmul(x + tf.cast(y[:1, :1], x.dtype) * 0)
        return y

    return run


def microseconds(function, x, repeats, passes=5):
    function(x)  # trace
    function(x)
    start = time.perf_counter()
    for _ in range(passes):
        function(x)
    return (time.perf_counter() - start) / passes / repeats * 1e6


def int8_matmul(weights):
    """x (float32, >= 0) -> x @ weights through int8 (weights quantized here, once)."""
    bias = tf.zeros([weights.shape[1]])
    largest = tf.reduce_max(tf.abs(weights))
    q_weights, w_min, w_max = tf.quantization.quantize(weights, -largest, largest, tf.qint8, mode="SCALED")[:3]

    def matmul(x):
        q_x, x_min, x_max = tf.quantization.quantize(x, 0.0, tf.reduce_max(x), tf.quint8, mode="SCALED")
        return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=q_x, b=q_weights, bias=bias, min_a=x_min, max_a=x_max, min_b=w_min, max_b=w_max,
            min_freezed_output=-100.0, max_freezed_output=100.0, Toutput=tf.float32, input_quant_mode="SCALED")

    return matmul


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    for rows, inputs, outputs in SHAPES:
        x = tf.nn.relu(tf.random.normal([rows, inputs]))
        weights = tf.random.normal([inputs, outputs]) / inputs ** 0.5
        bf16_weights = tf.cast(weights, tf.bfloat16)
        exact = tf.matmul(x, weights)
        row = dict(shape=[rows, inputs, outputs], int8_relative_error=float(
            tf.norm(int8_matmul(weights)(x) - exact) / tf.norm(exact)))
        row["float32_us"] = microseconds(chained(lambda v: tf.matmul(v, weights), args.repeats), x, args.repeats)
        row["bfloat16_us"] = microseconds(chained(lambda v: tf.matmul(v, bf16_weights), args.repeats),
                                          tf.cast(x, tf.bfloat16), args.repeats)
        row["int8_us"] = microseconds(chained(int8_matmul(weights), args.repeats), x, args.repeats)
        print(json.dumps({key: round(value) if key.endswith("_us") else value for key, value in row.items()}),
              flush=True)


if __name__ == "__main__":
    main()
