"""The error tree that decides what happens to a message.

`PermanentError` and its subclasses can never succeed by retrying: the message
is dead-lettered at once with the error as its reason. Every other exception is
transient: the message is nacked and Pub/Sub redelivers it with backoff until
the maximum number of attempts.
"""


class PermanentError(Exception):
    """Retrying cannot help; dead-letter the message now."""


class InvalidEvent(PermanentError):
    """The message fails its schema or a rule the schema cannot express."""


class UnknownEventType(InvalidEvent):
    """The message's `event_type` attribute names no event this service knows."""


def is_permanent(exc: BaseException) -> bool:
    """Would retrying `exc` fail the same way? Ours say so by type; a database
    `DataError` (a value Postgres cannot store, such as a NUL in text) always does."""
    if isinstance(exc, PermanentError):
        return True
    import psycopg  # here, so that shared.errors stays importable without a driver

    return isinstance(exc, psycopg.DataError)
