"""Exceptions: one class per libdlock status code, all under DlockError."""
from __future__ import annotations

from typing import Dict, Optional, Type


class DlockError(Exception):
    """A libdlock call failed.

    code: the status code (negative int, dlock.h's DLOCK_*); name: its
    name without prefix ("BUSY"); message: the library's message for this
    failure (dlock_errmsg(): what, where, why) or, when it gave none, the
    code's static text. str(e) is the message.
    """

    code: int = 0
    name: str = "UNKNOWN"

    def __init__(self, message: str, code: Optional[int] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if name is not None:
            self.name = name

    def __str__(self) -> str:
        return self.message


class Busy(DlockError):
    """The lock is held by another owner (a try-once acquire, wait=0)."""
    code, name = -1, "BUSY"


class TimedOut(DlockError, TimeoutError):
    """Gave up waiting for the lock (the wait ran out)."""
    code, name = -2, "TIMEDOUT"


class NotOwner(DlockError):
    """Not the owner: the lock expired or was taken by another."""
    code, name = -3, "NOT_OWNER"


class Lost(DlockError):
    """The lease was lost while the lock was held (watchdog)."""
    code, name = -4, "LOST"


class Canceled(DlockError):
    """The wait was cancelled (Client.cancel())."""
    code, name = -5, "CANCELED"


class Stale(DlockError):
    """A fencing token older than one the resource has seen."""
    code, name = -6, "STALE"


class NoQuorum(DlockError):
    """No majority of the servers could be reached (Redlock)."""
    code, name = -7, "NO_QUORUM"


class NotReplicated(DlockError):
    """Too few replicas acknowledged the write (wait_replicas)."""
    code, name = -8, "NOT_REPLICATED"


class LockDelay(DlockError):
    """Refused during the lock-delay after a failover or restart."""
    code, name = -9, "LOCK_DELAY"


class InvalidArgument(DlockError, ValueError):
    """An argument or option the library refuses."""
    code, name = -20, "EINVAL"


class ConnectionFailed(DlockError, ConnectionError):
    """I/O error talking to a server (retry may help)."""
    code, name = -21, "EIO"


class ServerTimeout(DlockError, TimeoutError):
    """A server did not answer in time (retry may help)."""
    code, name = -22, "ETIMEDOUT"


class ProtocolError(DlockError):
    """The peer does not speak Redis."""
    code, name = -23, "EPROTO"


class ServerError(DlockError):
    """The server returned an error."""
    code, name = -24, "ESERVER"


class OutOfMemory(DlockError, MemoryError):
    """The library ran out of memory."""
    code, name = -25, "ENOMEM"


class TLSError(DlockError):
    """TLS failed (handshake, certificate, CA)."""
    code, name = -26, "ETLS"


class AuthError(DlockError):
    """Authentication failed (WRONGPASS, NOAUTH): fix the credentials."""
    code, name = -27, "EAUTH"


class Refused(DlockError):
    """Refused by the server whoever asks again (ACL, READONLY...)."""
    code, name = -28, "EREFUSED"


BY_CODE: Dict[int, Type[DlockError]] = {
    c.code: c for c in (Busy, TimedOut, NotOwner, Lost, Canceled, Stale,
                        NoQuorum, NotReplicated, LockDelay, InvalidArgument,
                        ConnectionFailed, ServerTimeout, ProtocolError,
                        ServerError, OutOfMemory, TLSError, AuthError,
                        Refused)
}


def make(code: int, message: str, name: str) -> DlockError:
    """The exception for status CODE with MESSAGE."""
    cls = BY_CODE.get(code, DlockError)
    return cls(message, code, name)
