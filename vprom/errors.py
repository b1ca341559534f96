"""The one exception type users see.

Every stage raises `VpromError` for bad input or a failed check, with a message that names
the file, the record and what to do. The command line prints the message on one line and
exits non-zero; anything else escaping is a bug in vprom.
"""


class VpromError(Exception):
    """A failure the user can act on; the message says what and how."""
