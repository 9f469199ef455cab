"""The tool's own error types.

A `TinkerError` is something the user caused and can fix (bad script, bad config, a memory limit
nothing fits under). The CLI prints its message as one line and exits non-zero, without a
traceback. Messages name the problem and the fix, with the numbers involved.
"""


class TinkerError(Exception):
    """A user-facing error: the message is one line naming the problem and the fix."""


class ScriptError(TinkerError):
    """The launch script cannot be read (no launch line, missing model arguments, ...)."""


class ConfigError(TinkerError):
    """A configuration file or command-line value is wrong (unknown key, wrong type, ...)."""


class ProfileDataError(TinkerError):
    """A profiled-data folder is missing, incomplete or corrupt, or lacks a needed shape."""


class StrategyError(TinkerError):
    """A strategy breaks a divisibility or framework rule; the message says which."""


class InfeasibleError(TinkerError):
    """No strategy fits under the memory limit; the message gives the least memory needed."""


class LogError(TinkerError):
    """A training log cannot be read (not a log, no iteration times, an unknown form)."""
