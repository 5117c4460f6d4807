"""One error tree for the whole tool; ``cli.main`` catches it once and maps it to an exit code.

Exit codes: 1 an operation failed (a build, a playbook, a check), 2 bad input (unknown id, bad
pin, impossible combination, broken inventory), 3 broken compatibility data, 4 missing tooling
(no Docker engine, no ansible-playbook).
"""

from __future__ import annotations


class ProvisionError(Exception):
    """Base of every error the command line reports as ``error: …`` / ``hint: …``."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, details: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = list(details or [])


class InputError(ProvisionError):
    """Something the user gave us is wrong: an id, a pin, a file, an inventory."""

    exit_code = 2


class UnknownId(InputError):
    """An OS, GPU, framework or variant id that the catalogue does not know."""


class BadPin(InputError):
    """A pin that does not parse (``--cuda banana``)."""


class NoCompatibleStack(InputError):
    """The resolver tried every candidate and none satisfies every rule."""

    def __init__(self, message: str, *, eliminations: list[tuple[str, str]], hint: str | None):
        super().__init__(message, hint=hint, details=[f"{c}: {why}" for c, why in eliminations])
        self.eliminations = eliminations
        self.kinds: frozenset[str] = frozenset()  # the rules that eliminated candidates
        self.summary: list[str] = list(self.details)  # the same in a few lines (the resolver sets it)


class CompatDataError(ProvisionError):
    """A compat/ data file is unreadable or breaks its schema or an invariant."""

    exit_code = 3

    def __init__(self, file: str, key_path: str, problem: str, *, hint: str | None = None):
        where = f"{file}: {key_path}" if key_path else file
        super().__init__(
            f"{where}: {problem}",
            hint=hint or "fix the data file, or point --compat-dir at a valid copy",
        )
        self.file = file
        self.key_path = key_path


class ToolingError(ProvisionError):
    """A tool or service we drive is missing or unreachable (Docker engine, ansible)."""

    exit_code = 4


class OperationFailed(ProvisionError):
    """The operation ran and failed: a build step, a playbook on some host, a check."""

    exit_code = 1
