"""One TensorFlow-only serving process per test worker, shared by the tests
that serve exports (tests/conftest.py's `tf_only`).

An export is served as TF Serving serves it: in a fresh interpreter with
TensorFlow and tensorflow_text's compiled ops only (keras, keras_hub and
kseq cannot be imported there). Starting that interpreter costs a
TensorFlow import (6-12 s on 2 cores); the tests used to pay it once a
request. The server starts once per worker and takes every request: it
loads each export once, and after each request reports the modules it
holds, so every answer still proves that nothing but TensorFlow served it.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import time

from support import TF_ONLY_PREAMBLE, subprocess_env

# The server's loop: one JSON request a line on stdin, one answer a line on
# stdout after ANSWER (TensorFlow may write to stdout too).
SERVER = TF_ONLY_PREAMBLE + r"""
import base64, threading, traceback
ANSWER = "@@tf-only-answer@@ "
exports = {}


def signature(path, name):
    if path not in exports:
        exports[path] = tf.saved_model.load(path)
    return exports[path].signatures[name]


def plain(outputs):
    return {key: value.numpy().tolist() for key, value in outputs.items()}


def tensor(values, dtype):
    if isinstance(values, dict):  # {"base64": [...]}: bytes JSON cannot carry, such as encoded images
        values = [base64.b64decode(value) for value in values["base64"]]
    return tf.constant(values, dtype)


def call(serve, inputs):
    specs = serve.structured_input_signature[1]
    return plain(serve(**{name: tensor(values, specs[name].dtype) for name, values in inputs.items()}))


def outcome(serve, inputs):
    try:
        return {"outputs": call(serve, inputs)}
    except tf.errors.InvalidArgumentError as error:
        return {"error": error.message}


def under_threads(serve, requests, threads, calls):
    # Each thread calls the requests in turn, from its own offset: answers
    # that differ from the sequential ones, as (thread, call).
    expected = [call(serve, inputs) for inputs in requests]
    mismatches = []

    def client(thread):
        for index in range(calls):
            request = (thread + index) % len(requests)
            if call(serve, requests[request]) != expected[request]:
                mismatches.append((thread, index))

    running = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(120)
    return mismatches + [("still running", t) for t, thread in enumerate(running) if thread.is_alive()]


def answer(request):
    serve = signature(request["path"], request["signature"])
    names = list(serve.structured_input_signature[1])
    if request["texts"] is not None:  # batches of texts for the first input
        request["requests"] = [{names[0]: texts} for texts in request["texts"]]
    result = {"inputs": names, "answers": [outcome(serve, inputs) for inputs in request["requests"]]}
    if request["threads"]:
        result["mismatches"] = under_threads(serve, request["requests"], request["threads"], request["calls"])
    if request["variable_dtypes"]:
        result["variable_dtypes"] = sorted({v.dtype.name for v in exports[request["path"]].variables
                                            if v.dtype.is_floating})
    result["modules"] = sorted(m for m, v in sys.modules.items()
                               if v is not None and m.split(".")[0] in ("kseq", "keras", "keras_hub", "tf_keras"))
    return result


def answer_or_failure(line):
    try:
        return answer(json.loads(line))
    except Exception:
        return {"failure": traceback.format_exc()}


for line in sys.stdin:
    print(ANSWER + json.dumps(answer_or_failure(line), default=lambda b: b.decode()), flush=True)
"""
ANSWER = "@@tf-only-answer@@ "


class TFOnlyServer:
    """A running SERVER process: `serve` sends it a request and waits for the answer."""

    def __init__(self, timeout=300):
        self.timeout = timeout
        self.stderr = tempfile.TemporaryFile()  # TensorFlow's logs; a pipe could fill and block it
        self.process = None

    def start(self):
        """A fresh process: at the first request, and after one that failed
        (its answer may still come, to the next request's question)."""
        self.process = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, env=subprocess_env())
        self.pending = b""

    def serve(self, path, *requests, signature="serving_default", threads=0, calls=0, variable_dtypes=False,
              texts=None):
        """Calls `signature` of the export at `path` once a request ({input
        name: values}; bytes that are no text as {"base64": [...]}), then,
        with `threads`, `calls` times from each of `threads` threads.
        Returns {"inputs": the signature's input names, "answers":
        [{"outputs": {name: values}} or {"error": message} a request],
        "modules": the kseq/keras modules imported, and with
        `threads` "mismatches": [(thread, call)] whose answer differed;
        with `variable_dtypes`, the dtypes of the export's variables}.
        `texts`, batches of texts, stand for requests to the first input."""
        request = dict(path=path, signature=signature, requests=list(requests), threads=threads, calls=calls,
                       variable_dtypes=variable_dtypes, texts=texts)
        if self.process is None:
            self.start()
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            reply = json.loads(self.answer_line())
        except BaseException:
            self.stop()
            raise
        assert "failure" not in reply, reply.get("failure")
        return reply

    def serve_text_batches(self, path, batches):
        """[{"input": the serving signature's first input, output name:
        values}] a batch of texts (lists of strings)."""
        reply = self.serve(path, texts=batches)
        assert all("outputs" in answer for answer in reply["answers"]), reply["answers"]
        return [{"input": reply["inputs"][0], **answer["outputs"]} for answer in reply["answers"]]

    def serve_texts(self, path, texts):
        """`serve_text_batches` of one batch."""
        return self.serve_text_batches(path, [texts])[0]

    def answer_line(self):
        """The next ANSWER line of the server's stdout, waited for up to `timeout` seconds."""
        deadline = time.monotonic() + self.timeout
        while True:
            line, newline, rest = self.pending.partition(b"\n")
            if newline:
                self.pending = rest
                if line.startswith(ANSWER.encode()):
                    return line[len(ANSWER):].decode()
                continue
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.process.stdout.fileno(), 1 << 16) if ready else b""
            if not chunk:
                raise AssertionError(f"the TensorFlow-only server gave no answer:\n{self.log()[-3000:]}")
            self.pending += chunk

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            finally:
                self.stop()
        self.stderr.close()
