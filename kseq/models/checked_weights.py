"""`load_weights` that says which model a `.keras` file holds."""

import json
import os
import zipfile

# Keys of get_config that do not change the weights.
_IGNORED_KEYS = ("name", "trainable", "dtype")


class CheckedWeightLoading:
    """Mixin for kseq models: when `load_weights` of a `.keras` file fails
    because the file was saved from another class, or from the same class
    built with other arguments, the ValueError names the file's class and
    the arguments that differ, instead of only keras' list of layers that
    "could not be loaded". (`.weights.h5` files hold no configuration.)"""

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        """Loads weights as keras does, naming the saved class and arguments when they differ.

        Args:
            filepath: a `.keras` or `.weights.h5` file.
            skip_mismatch: skip layers whose weights do not match. Defaults to False.
            **kwargs: keras' other `load_weights` arguments.

        Returns:
            What keras' `load_weights` returns.

        Raises:
            ValueError: if the weights do not fit this model; for a `.keras`
                file, the message names its class and the arguments that differ.
        """
        try:
            return super().load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)
        except ValueError as error:
            path = os.fspath(filepath)
            if not (path.endswith(".keras") and zipfile.is_zipfile(path)):
                raise
            with zipfile.ZipFile(path) as archive:
                saved = json.loads(archive.read("config.json"))
            raise ValueError(f"{self._describe_mismatch(path, saved)}\n{error}") from None

    def _describe_mismatch(self, path, saved):
        mine = type(self).__name__
        theirs = saved.get("class_name")
        if theirs != mine:
            return (
                f"`filepath` {path!r} holds a model of class {theirs}, not {mine}: load the whole "
                f"model with keras.saving.load_model({path!r}) instead."
            )
        config = json.loads(json.dumps(self.get_config(), default=str))
        other = saved.get("config", {})
        different = [
            f"{key}={other[key]!r} (this model: {config[key]!r})"
            for key in config
            if key not in _IGNORED_KEYS and key in other and other[key] != config[key]
        ]
        built = f"built with {', '.join(different)}" if different else "with other weights"
        return (
            f"`filepath` {path!r} holds a {mine} {built}; build this model with the same "
            f"arguments, or use keras.saving.load_model({path!r})."
        )
