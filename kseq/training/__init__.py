"""Training: losses, metrics, schedules, callbacks (evaluation periods,
time limits, samples, attention maps), resuming, distribution, precision,
XLA, evaluation scores and the tasks' plumbing."""
