"""The steps a run has finished after training, so that the same command,
started again after a kill, goes on from the first unfinished one.

Training ends by writing the weights it tests and exports
(`kseq.training.config.warm_start.keep_trained`) and recording itself here; only
then is its backup released. Each later step (choosing the decoding,
testing, exporting) records its result when it ends. A restart finds them
in `<logdir>/phases.json` (written whole or not at all) and runs only what
is missing, with the trained weights: a kill after training never costs the
training again.
"""

import json
import os

from kseq._atomic import write_json_atomic


class Phases:
    """Records each finished phase of the run in `folder` with its JSON result.

    `done` holds {phase name: its JSON result}, recorded as each ends in
    `<folder>/phases.json`.

    Args:
        folder: the run's folder.

    Raises:
        SystemExit: phases.json is damaged.

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> Phases(folder).once("test", lambda: {"bleu": 21.5})
    {'bleu': 21.5}
    >>> Phases(folder).get("test")  # a restarted run's
    {'bleu': 21.5}
    """

    FILE = "phases.json"

    def __init__(self, folder):
        self.path = os.path.join(folder, self.FILE)
        try:
            with open(self.path, encoding="utf-8") as f:
                self.done = json.load(f)
        except FileNotFoundError:
            self.done = {}
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise SystemExit(f"{self.path} is damaged ({error}); delete it to run the steps after training "
                             "again (the trained weights stay), or delete its folder to start over.") from None

    def get(self, name):
        """Gives the result phase `name` recorded.

        Args:
            name: the phase's name.

        Returns:
            Its result, or None if it has not run.
        """
        return self.done.get(name)

    def record(self, name, result):
        """Records `result` as phase `name`'s, atomically.

        Args:
            name: the phase's name.
            result: JSON values.

        Returns:
            `result`.
        """
        self.done[name] = result
        write_json_atomic(self.path, self.done)
        return result

    def once(self, name, compute):
        """Runs phase `name` once: gives its recorded result, else records `compute()`'s.

        Args:
            name: the phase's name.
            compute: `() -> result` (JSON values), called only if `name` has no record.

        Returns:
            The phase's result.
        """
        if name in self.done:
            print(f"{name}: done before this run (recorded in {self.path})")
            return self.done[name]
        return self.record(name, compute())
