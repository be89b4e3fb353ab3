"""The error babelspec raises on a user's input: a value, file, spec or setting it cannot take.

Its message names what was wrong and how to fix it. The command line ends a ``UserError`` as
one line and exit status 2 (``babelspec.cli.ErrorExitGroup``); any other exception is a fault
in babelspec or below it and keeps its traceback. A ``ValueError``, so code that caught the
library's bad-value errors before still catches them.
"""

from __future__ import annotations


class UserError(ValueError):
    """A user's input babelspec cannot take; the message says what and how to fix it."""


__all__ = ["UserError"]
