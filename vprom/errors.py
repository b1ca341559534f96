"""The one exception type users see: the command line prints its message on one line and
exits non-zero; anything else escaping is a bug in vprom."""


class VpromError(Exception):
    """A failure the user can act on; the message says what and how."""
