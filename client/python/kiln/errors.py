"""kiln's errors: one exception class per kiln error code (kiln/client/kiln.h), each
carrying the code, its name and libkiln's (or the daemon's) message.

    try:
        client.put(key, data)
    except kiln.QuotaExceeded as e:
        print(e.code, e.message)

Every class derives from KilnError. A miss is never an exception (get and stat return
None); NotFound is raised only where something named must exist (a source by hash).
"""


class KilnError(Exception):
    """Base class. `code` is the numeric kiln_status, `name` its text ("unavailable"),
    `message` what libkiln or kilnd said."""

    code = -1
    name = "unknown"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None and code != type(self).code:
            self.code = code

    def __str__(self):
        return f"{self.name}: {self.message}"


def _error(class_name, code, name, doc):
    return type(class_name, (KilnError,), {"code": code, "name": name, "__doc__": doc})


InvalidArgument = _error("InvalidArgument", 1, "invalid_argument", "Bad input: a malformed key, hash or query.")
NotFound = _error("NotFound", 2, "not_found", "The named thing is not stored (e.g. a source by hash).")
Corrupt = _error("Corrupt", 3, "corrupt", "Stored bytes failed verification; they were quarantined, never served.")
KilnIOError = _error("KilnIOError", 4, "io_error", "A file could not be read or written.")
NoSpace = _error("NoSpace", 5, "no_space", "The daemon's disk is full.")
QuotaExceeded = _error("QuotaExceeded", 6, "quota_exceeded", "The store's quota would be exceeded.")
ReadOnly = _error("ReadOnly", 7, "read_only", "The store is read-only.")
PermissionDenied = _error("PermissionDenied", 8, "permission_denied",
                          "kilnd refused the request for this user; the message names the role needed.")
ProtocolError = _error("ProtocolError", 9, "protocol_error", "The daemon's reply did not follow the protocol.")
Unavailable = _error("Unavailable", 10, "unavailable",
                     "No daemon on the socket or the connection was lost; the next call connects again.")
Timeout = _error("Timeout", 11, "timeout", "A wait ran out (a build goes on; a later get finds it).")
Busy = _error("Busy", 12, "busy", "The daemon is busy; retry later.")
BuildFailed = _error("BuildFailed", 13, "build_failed", "The build failed; the message holds the worker's last error.")
NoSource = _error("NoSource", 14, "no_source", "No source is registered for the key's model hash.")
Unsupported = _error("Unsupported", 15, "unsupported", "The daemon cannot do this (e.g. builds are disabled).")
Cancelled = _error("Cancelled", 16, "cancelled", "The request was cancelled.")
Internal = _error("Internal", 17, "internal", "A bug in libkiln or kilnd.")

BY_CODE = {cls.code: cls for cls in (InvalidArgument, NotFound, Corrupt, KilnIOError, NoSpace, QuotaExceeded,
                                     ReadOnly, PermissionDenied, ProtocolError, Unavailable, Timeout, Busy,
                                     BuildFailed, NoSource, Unsupported, Cancelled, Internal)}


def from_status(code, message):
    """The exception for a non-zero kiln_status (KilnError with the code for unknown ones)."""
    cls = BY_CODE.get(code)
    if cls is None:
        return KilnError(message, code=code)
    return cls(message)

__all__ = ["KilnError", "from_status", "BY_CODE"] + [cls.__name__ for cls in BY_CODE.values()]
