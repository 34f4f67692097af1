"""podsweeper: event-driven cleanup of pods that Kubeflow training jobs leave behind."""

__version__ = "0.1.0"
