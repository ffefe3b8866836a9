"""The machine's load during a benchmark phase, for its JSON record."""

import os
import threading


class LoadSampler:
    """Samples the 1-minute load average every `every` seconds in a thread,
    so the results show whether other jobs shared the CPU (on a 2-core
    machine a benchmark alone keeps it near 2)."""

    def __init__(self, every=5.0):
        self.samples, self.every = [os.getloadavg()[0]], every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(self.every):
            self.samples.append(os.getloadavg()[0])

    def finish(self):
        """{"start", "max", "mean"} of the samples."""
        self.stop.set()
        self.thread.join()
        return {"start": round(self.samples[0], 2), "max": round(max(self.samples), 2),
                "mean": round(sum(self.samples) / len(self.samples), 2)}
