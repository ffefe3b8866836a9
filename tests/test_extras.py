"""Without an optional extra (pyproject's `plots`, `serving`) the part it serves
is left out with one warning naming the extra; everything else still works."""

import importlib.util
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

from kseq import extras
from kseq.export.publishing import write_servable
from kseq.export.warmup import WARMUP_FILE
from kseq.training.loop.callbacks import AttentionMaps


@pytest.fixture
def without(monkeypatch):
    """without(module): find_spec says `module` is not installed; warnings start afresh."""
    monkeypatch.setattr(extras, "_warned", set())
    real = importlib.util.find_spec

    def hide(module):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    return hide


class Doubler(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def double(self, x):
        return {"y": 2 * x}


def export(folder):
    module = Doubler()
    return write_servable(str(folder), {"serving_default": (module.double, [tf.TensorSpec([None], tf.float32)])},
                          [module], warmup={"serving_default": {"x": [1.0]}})


def test_an_export_without_the_serving_extra_has_no_warmup_and_says_so_once(tmp_path, without):
    assert os.path.exists(os.path.join(export(tmp_path / "with"), WARMUP_FILE))
    without("tensorflow_serving")
    with pytest.warns(UserWarning, match=r"no TF Serving warm-up requests written: tensorflow_serving is not "
                                         r"installed \(pip install 'kseq\[serving\]'\)"):
        path = export(tmp_path / "without")
    assert not os.path.exists(os.path.join(path, WARMUP_FILE))
    assert tf.saved_model.load(path).signatures["serving_default"](x=tf.constant([3.0]))["y"].numpy() == [6.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export(tmp_path / "again")  # once a process


def test_attention_maps_without_the_plots_extra_draw_nothing_and_say_so(tmp_path, without):
    without("matplotlib")
    maps = AttentionMaps(np.ones((1, 3), "int32"), lambda ids: pytest.fail("decoded"), str, str(tmp_path))
    with pytest.warns(UserWarning, match=r"attention maps are not drawn: matplotlib is not installed "
                                         r"\(pip install 'kseq\[plots\]'\)"):
        maps.on_epoch_end(0)  # decoding nothing: output_ids fails the test if called
