"""The one exception type users see (the command line prints its message on one line and exits
non-zero; anything else escaping is a bug in vprom), and the search of an exception's causes."""

from __future__ import annotations


class VpromError(Exception):
    """A failure the user can act on; the message says what and how."""


def in_chain(error: BaseException | None, kinds) -> BaseException | None:
    """The first exception of `kinds` among `error` and what it was raised from or while
    handling (a cleanup that fails during a Ctrl-C is still the Ctrl-C)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kinds):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
