"""The small exception hierarchy the HTTP handler maps to status codes."""


class PodsweeperError(Exception):
    """Base of every error podsweeper raises on purpose."""


class BadEvent(PodsweeperError):
    """The input is not something we accept: answer 400, never retried, nothing deleted."""


class ApiUnavailable(PodsweeperError):
    """The Kubernetes API failed, throttled or timed out: answer 503 so the source retries."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ConfigError(PodsweeperError):
    """Invalid configuration: the process must not start."""
