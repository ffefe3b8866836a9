import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))  # for `import support`

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

# Two logical CPUs, so MirroredStrategy tests run with two replicas. This
# must happen before TensorFlow initialises its devices.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2,
)


@pytest.fixture(autouse=True)
def seeded():
    keras.utils.set_random_seed(1234)
