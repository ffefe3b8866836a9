"""Training pieces: precision, XLA, evaluation cadence."""
