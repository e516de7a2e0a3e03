"""The error tree that decides what happens to a message.

`PermanentError` and its subclasses can never succeed by retrying: the message
is dead-lettered at once with the error as its reason. An error that says a
dependency is down (`dependency_of`) is not the event's fault: the worker holds
the message, without spending its delivery attempts, until the dependency
answers again. Every other exception is transient for the event: it is retried
after a backoff until the maximum number of attempts, then dead-lettered.
"""


class PermanentError(Exception):
    """Retrying cannot help; dead-letter the message now."""


class InvalidEvent(PermanentError):
    """The message fails its schema or a rule the schema cannot express."""


class EventTooLarge(InvalidEvent):
    """The event's message would be larger than the bus takes; `field` is the part
    of it that makes it so."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class UnknownEventType(InvalidEvent):
    """The message's `event_type` attribute names no event this service knows."""


def is_permanent(exc: BaseException) -> bool:
    """Would retrying `exc` fail the same way? Ours say so by type; a database
    `DataError` (a value Postgres cannot store, such as a NUL in text) always does."""
    if isinstance(exc, PermanentError):
        return True
    import psycopg  # here, so that shared.errors stays importable without a driver

    return isinstance(exc, psycopg.DataError)


class DependencyError(Exception):
    """A dependency is unreachable, timing out or refusing for reasons of its own
    (the LLM endpoint rate-limiting, its credentials refused): not the event's fault.
    A worker holds the message until `dependency` answers again."""

    def __init__(self, dependency: str, message: str) -> None:
        super().__init__(message)
        self.dependency = dependency


# SQLSTATE classes of a server that cannot serve anyone right now: connection
# exceptions, insufficient resources (disk full, out of memory, too many
# connections), operator intervention (shutdown, starting up; not 57014, a
# statement timeout, which a costly event can cause) and system errors.
_POSTGRES_DOWN = ("08", "53", "57P", "58")
# Valkey answers that say the server, not the command, is the problem.
_VALKEY_DOWN = frozenset(
    {
        "ConnectionError",
        "TimeoutError",
        "ReadOnlyError",
        "OutOfMemoryError",
        "ClusterDownError",
        "MasterDownError",
        "TryAgainError",
    }
)


def dependency_of(exc: BaseException | None) -> str | None:
    """The dependency that `exc`, or an exception it was raised from, says is down:
    `valkey`, `postgres`, `pubsub`, or what a `DependencyError` names; None when
    the failure may be the event's own."""
    import psycopg  # here, so that shared.errors stays importable without the drivers
    import valkey
    from google.api_core import exceptions as gexc

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, PermanentError):
            return None
        if isinstance(exc, DependencyError):
            return exc.dependency
        if isinstance(exc, valkey.exceptions.ValkeyError):
            down = any(cls.__name__ in _VALKEY_DOWN for cls in type(exc).__mro__)
            return "valkey" if down else None
        if isinstance(exc, psycopg.InterfaceError):  # the connection is closed
            return "postgres"
        if isinstance(exc, psycopg.OperationalError):
            state = getattr(exc, "sqlstate", None)
            if state is None or state.startswith(_POSTGRES_DOWN):
                return "postgres"
            return None
        if isinstance(exc, (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError)):
            return "pubsub"
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
