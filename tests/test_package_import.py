"""`import kseq` changes nothing of the process beyond choosing the
TensorFlow backend where none was chosen: no file descriptor redirected, no
TF_CPP_MIN_LOG_LEVEL set, nothing of TensorFlow loaded until a subpackage
is touched; the subpackages and shortcuts load when first asked for, and a
backend other than TensorFlow is refused where kseq's keras code loads."""

import json
import subprocess
import sys

import keras
import pytest

import kseq
from support import subprocess_env

# Run in a fresh process: what `import kseq` does, then what touching a subpackage does.
FRESH_IMPORT = """
import json, logging, os, sys

def state():
    stat = os.fstat(2)
    return {"stderr": [stat.st_dev, stat.st_ino], "level": os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
            "loaded": sorted(name for name in ("tensorflow", "keras") if name in sys.modules)}

before = state()
handlers = list(logging.getLogger().handlers), logging.getLogger().level
import kseq
imported = dict(state(), backend=os.environ.get("KERAS_BACKEND"),
                undirected=sorted(set(kseq.__all__) - set(dir(kseq))),
                logging=handlers == (list(logging.getLogger().handlers), logging.getLogger().level),
                ids=[kseq.PAD_ID, kseq.BOS_ID, kseq.EOS_ID, kseq.UNK_ID], version=kseq.__version__)
imported["loaded_by_ids"] = state()["loaded"]
kseq.layers
print(json.dumps({"before": before, "imported": imported, "touched": state()}))
"""

ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def users_environment(**extra):
    """A child's environment with no TensorFlow log level nor backend, as a user's shell has it."""
    env = subprocess_env()
    for name in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "PYTHONFAULTHANDLER"):
        env.pop(name, None)
    return {**env, **extra}


def test_importing_kseq_changes_nothing_of_the_process():
    done = subprocess.run([sys.executable, "-c", FRESH_IMPORT], capture_output=True, text=True,
                          env=users_environment(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    before, imported, touched = found["before"], found["imported"], found["touched"]
    assert before["loaded"] == imported["loaded"] == imported["loaded_by_ids"] == []
    assert imported["level"] is None and touched["level"] is None
    assert before["stderr"] == imported["stderr"] == touched["stderr"]
    assert imported["backend"] == "tensorflow" and imported["logging"]
    assert imported["undirected"] == [], "dir(kseq) lists every name of __all__ before any is loaded"
    assert imported["ids"] == [0, 1, 2, 3] and imported["version"] == kseq.__version__
    assert touched["loaded"] == ["keras", "tensorflow"]
    # The user set no level, so TensorFlow's start-up lines reach its stderr unfiltered.
    assert ABSL_NOTICE in done.stderr.splitlines(), done.stderr[-3000:]


def test_every_public_name_resolves_and_dir_lists_it():
    for name in kseq.__all__:
        assert getattr(kseq, name) is not None, name
    assert set(kseq.__all__) <= set(dir(kseq))
    assert kseq.losses is kseq.training.objectives.losses and kseq.callbacks is kseq.training.loop.callbacks
    assert kseq.models.TransformerSeq2Seq.__name__ == "TransformerSeq2Seq"
    from kseq import layers, schedules

    assert layers is kseq.layers and schedules is kseq.training.objectives.schedules
    assert kseq.errors.UsageError.__name__ == "UsageError", "a submodule, as `import kseq.errors` binds it"


@pytest.mark.parametrize("name", ["no_such_thing", "__wrapped__"])
def test_an_unknown_name_is_an_attribute_error(name):
    with pytest.raises(AttributeError, match=f"module 'kseq' has no attribute '{name}'"):
        getattr(kseq, name)


REFUSED = """
import sys
import kseq
assert kseq.PAD_ID == 0 and "tensorflow" not in sys.modules
for load in (lambda: kseq.models, lambda: __import__("kseq.layers"), lambda: __import__("kseq._compat")):
    try:
        load()
    except ImportError as error:
        print(error)
"""


def test_a_backend_other_than_tensorflow_is_refused_where_kseqs_keras_code_loads():
    """Named by kseq whether or not that backend is installed here (keras
    itself fails to import without jax, naming jax)."""
    done = subprocess.run([sys.executable, "-c", REFUSED], capture_output=True, text=True,
                          env=users_environment(KERAS_BACKEND="jax"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    message = "kseq needs the Keras TensorFlow backend; KERAS_BACKEND is 'jax'. Set KERAS_BACKEND=tensorflow."
    assert done.stdout.splitlines() == [message] * 3


# A .keras file saved by one process, loaded by another that imports keras,
# then kseq, as sorted imports do, and touches nothing of kseq before loading.
LOAD_AFTER_KERAS = """
import sys
import keras
import kseq

model = keras.saving.load_model(sys.argv[1])
print(type(model).__module__, type(model).__name__)
"""


def test_a_keras_file_loads_after_import_keras_then_kseq(tmp_path):
    model = kseq.models.RNNSeq2Seq(8, 8, embed_dim=4, units=4, attention="dot")
    model.build()
    model.compile(keras.optimizers.Adam(1e-3), kseq.losses.MaskedSparseCategoricalCrossentropy())
    path = str(tmp_path / "model.keras")
    model.save(path)
    done = subprocess.run([sys.executable, "-c", LOAD_AFTER_KERAS, path], capture_output=True, text=True,
                          env=users_environment(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["kseq.models.rnn_seq2seq", "RNNSeq2Seq"]
