import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))  # for `import support`

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.distribute import mirrored_strategy  # noqa: E402

# Two logical CPUs, so MirroredStrategy tests run with two replicas. This
# must happen before TensorFlow initialises its devices.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2,
)


def pytest_collection_modifyitems(items):
    """Long tests first (stable: modules stay together): run last, one of
    them would keep one worker busy while the other has finished."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(autouse=True)
def seeded():
    keras.utils.set_random_seed(1234)


def _with_fresh_collective_keys(init):
    """Every MirroredStrategy numbers its collectives from the same keys, and
    the runtime remembers a key's shape for the whole process, so strategies
    of different tests can collide ("Shape mismatch in the collective
    instance"). TensorFlow's own tests give each strategy a fresh key range
    through `_collective_key_base`; here every new strategy gets one."""

    def fresh(self, *args, **kwargs):
        mirrored_strategy.MirroredStrategy._collective_key_base += 100000
        init(self, *args, **kwargs)

    return fresh


mirrored_strategy.MirroredStrategy.__init__ = _with_fresh_collective_keys(
    mirrored_strategy.MirroredStrategy.__init__
)
