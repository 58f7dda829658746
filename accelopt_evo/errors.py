"""The one exception type the CLI turns into a one-line message and exit status 2."""


class UserError(Exception):
    """Something the user can fix: a bad flag, config value, path or problem name.

    The message is shown as-is on one line, so it must name the offending thing.
    """
