"""The one base of every error that means bad input.

The `proxycomp` command prints a `UserError` as one line and exits with status 2; anything else is a bug and
keeps its traceback. This module imports nothing, so every layer (the gym's judge and workers included) can
raise it without depending on the rest of the package.
"""


class UserError(ValueError):
    """Bad input (a flag, a config field, a path, a file's contents); the message names it and what to do."""
