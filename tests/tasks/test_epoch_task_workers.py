"""The streamed text tasks under `--strategy multiworker`, two workers on
127.0.0.1 as two machines would run them: each reads its own half of the
training lines (no worker reads another's), and both end together with the
chief's results written."""

import json
import re
import subprocess

import pytest

from support import subprocess_env
from test_epoch_task_faults import command, read_json
from test_translate_faults import free_ports

pytestmark = pytest.mark.long


def run_workers(argv):
    """Each worker's output, once both ended (with exit code 0)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=subprocess_env(TF_CONFIG=json.dumps({"cluster": cluster,
                                                                  "task": {"type": "worker", "index": index}})))
        for index in range(2)
    ]
    try:
        outputs = [worker.communicate(timeout=400)[0] for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-3000:]
    return outputs


def texts_read(output):
    """The training texts (a language model's: tokens) this worker read, a number a model trained."""
    return [int(count.replace(",", ""))
            for count in re.findall(r"this worker read ([\d,]+) training (?:texts|tokens)", output)]


@pytest.mark.slow  # about a minute each: two task processes under MultiWorkerMirroredStrategy
@pytest.mark.parametrize("name", ["classify", "language_model", "generate_reviews"])
def test_two_workers_each_read_their_own_half_of_the_lines_and_end_together(name, tmp_path):
    alone, two = tmp_path / "alone", tmp_path / "two"
    alone.mkdir()
    two.mkdir()
    single = subprocess.run(command(name, alone), env=subprocess_env(), capture_output=True, text=True,
                            timeout=400)
    assert single.returncode == 0, (single.stdout + single.stderr)[-3000:]
    argv = [*command(name, two), "--strategy", "multiworker"]
    outputs = run_workers(argv)
    assert "this is worker 1" in outputs[1]
    reads = [texts_read(output) for output in outputs]
    assert reads[0] and len(reads[0]) == len(reads[1]) == len(texts_read(single.stdout))
    for first, second, whole in zip(*reads, texts_read(single.stdout)):
        assert first + second == whole, "every training text read once an epoch, by one worker"
        assert abs(first - second) <= whole // 10, "every other training line"
    metrics = read_json(two / "runs" / "metrics.json")
    assert metrics is not None and metrics["steps"] > 0, "the chief wrote the run's results"
