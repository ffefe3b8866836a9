"""TF Serving's warm-up requests: `assets.extra/tf_serving_warmup_requests`,
a TFRecord of PredictionLog protos that the server replays when it loads a
version, so that its first real request does not pay the tracing."""

import os

import tensorflow as tf

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def write_warmup_requests(folder, model_name, requests):
    """Writes `<folder>/assets.extra/tf_serving_warmup_requests`.

    Args:
        folder: the SavedModel's folder.
        model_name: the name TF Serving serves the model under.
        requests: {signature name: {input name: values (a list or array)}}.
    """
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    os.makedirs(os.path.join(folder, "assets.extra"), exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(folder, WARMUP_FILE)) as writer:
        for signature, inputs in requests.items():
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature))
            for name, values in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(values))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def read_warmup_requests(path):
    """Reads the warm-up requests of the SavedModel at `path`, as TF Serving replays them.

    Args:
        path: the SavedModel's folder (a version).

    Returns:
        [(signature name, {input name: NumPy array})], in the file's order.
    """
    from tensorflow_serving.apis import prediction_log_pb2

    requests = []
    for record in tf.data.TFRecordDataset(os.path.join(path, WARMUP_FILE)):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        requests.append((request.model_spec.signature_name, inputs))
    return requests
