"""podsweeper: event-driven cleanup of pods that Kubeflow training jobs leave behind."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("podsweeper")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
