"""The errors of a pull: each message names what failed (the host, the file) and, where there is one, what to do."""

from __future__ import annotations


class PullError(ValueError):
    """A pull that failed; the message says what failed and, where there is one, what to do."""


class NetworkError(PullError):
    """The host could not be reached or the connection failed; `transient` when a retry may help."""

    def __init__(self, message: str, host: str, transient: bool):
        super().__init__(message)
        self.host, self.transient = host, transient


class ChecksumError(PullError):
    """Downloaded bytes that are not the file that was asked for; they have been deleted."""


class DiskFullError(PullError):
    pass
