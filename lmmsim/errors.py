"""User-facing errors.

Anything a user can get wrong (a scenario key, a catalog name, a trace row)
raises :class:`UserError`. The CLI prints its one-line message to stderr and
exits with code 2, never a traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in user input; ``str(err)`` is the single line shown to the user.

    ``key`` names the offending scenario key (dotted) or file location, so the
    message always starts with where to look.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


def choices(names) -> str:
    """Format valid choices for an error message: ``'a', 'b', 'c'``."""
    return ", ".join(repr(n) for n in sorted(names))


class StuckRunError(Exception):
    """A run whose event queue emptied while requests were still in the system:
    they could never finish. The CLI prints the one-line message and exits 3."""
