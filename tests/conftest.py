import functools
import gc
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The tests' XLA programs are small and run a few times: LLVM's optimisation
# of each costs more than it saves (benchmarks/RESULTS.md, "Test suite and
# packaging"). XLA's own HLO passes, and so what the tests compare, are the
# same at any level. Set before TensorFlow loads (XLA reads its flags once);
# the tests' subprocesses inherit it. A user's XLA_FLAGS is kept.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
sys.path.insert(0, os.path.dirname(__file__))  # for `import support`

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from kseq._compat import fresh_collective_keys_per_strategy  # noqa: E402
import support  # noqa: E402
from tf_only_server import TFOnlyServer  # noqa: E402

# Two logical CPUs, so MirroredStrategy tests run with two replicas, and on
# a GPU two logical GPUs (tests/test_gpu.py). This must happen before
# TensorFlow initialises its devices.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2,
)
GPUS = tf.config.list_physical_devices("GPU")
if GPUS:
    # Each of the two pytest workers takes two slices of the first GPU.
    megabytes = int(os.environ.get("KSEQ_TEST_GPU_MEMORY_MB", "8192"))
    tf.config.set_logical_device_configuration(
        GPUS[0], [tf.config.LogicalDeviceConfiguration(memory_limit=megabytes)] * 2
    )


def pytest_collection_modifyitems(items):
    """Long tests first (stable: modules stay together): run last, one of
    them would keep one worker busy while the other has finished. Tests
    marked `gpu` are skipped where TensorFlow sees no GPU."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    if not GPUS:
        skip = pytest.mark.skip(reason="needs a GPU; TensorFlow finds none on this machine")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def seeded():
    keras.utils.set_random_seed(1234)


@pytest.fixture(autouse=True)
def collected_after_slow_tests():
    """Garbage left by a test that ran a second or more is collected as it
    ends, and what survives is frozen out of later collections.

    Such tests iterate tf.data pipelines. An iterator caught in a reference
    cycle keeps its autotuning thread alive, which waits longer and longer
    between rounds (up to a minute); deleting the iterator waits out the
    current round when the CPU is busy (TF 2.21; benchmarks/iterator_deletion.py at 0fd0d8a).
    Collected much later, in another test, one stalled that test for up to
    60 s. Collecting young iterators bounds the wait; freezing the survivors
    keeps each collection to one test's objects (a full one took about 1 s).
    """
    start = time.monotonic()
    yield
    if time.monotonic() - start >= 1.0:
        gc.collect()
        gc.freeze()


@pytest.fixture(autouse=True)
def float32_is_float32(request):
    """Tests compare float32 results to 1e-5: on Ampere and later GPUs
    TensorFlow would run float32 matmuls as TF32 (about 1e-3 relative
    error), so TF32 is off in every test but those marked `tf32`, which
    keep TensorFlow's default and derive their tolerances from it
    (`support.tolerance`). On a CPU the setting changes nothing."""
    if request.node.get_closest_marker("tf32"):
        yield
        return
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        yield
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)


# Many MirroredStrategy objects in one process: each its own collective keys.
fresh_collective_keys_per_strategy()


def _prefetch_without_autotuning():
    """Pipelines ending in `prefetch` (all of kseq's) run without tf.data's
    autotuning thread in the test processes; users' pipelines keep it.

    Keras leaves each `fit`'s iterators in a reference cycle, so the garbage
    collector deletes them later, at any line. A deletion waits for the
    iterator's autotuning thread, which on a CPU the other worker keeps busy
    could sleep out a round that grows as the iterator lives: py-spy found a
    task run stalled 24 s that way, in a collection started while it traced
    its model graph (benchmarks/RESULTS.md, "Test suite and packaging"). Autotuning sets only buffer sizes and
    parallelism: the elements and their order, which the tests assert, are
    the same without it."""
    prefetch = tf.data.Dataset.prefetch
    options = tf.data.Options()
    options.autotune.enabled = False

    @functools.wraps(prefetch)
    def untuned(self, *args, **kwargs):
        return prefetch(self, *args, **kwargs).with_options(options)

    tf.data.Dataset.prefetch = untuned


_prefetch_without_autotuning()


@pytest.fixture(scope="session")
def tf_only():
    """This worker's TensorFlow-only serving process (`tf_only_server.TFOnlyServer`)."""
    server = TFOnlyServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def made_once(tmp_path_factory):
    """made_once(name, make) -> (folder, result): `support.made_once`, for
    task runs and exports that tests only read, made once for both workers."""
    return functools.partial(support.made_once, tmp_path_factory)
