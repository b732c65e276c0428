"""ClickHouse's errors as ours, at the boundary: what waiting may cure is StoreUnavailable, what
proves a batch wrong is Rejected, the rest StoreError (see ``classify`` in
``store/produce/_spool.py``, the one policy writers follow, which looks at our classes only).

Both transports report a server error with its number (``Code: 164. DB::Exception: …``; the
HTTP client also has it from the ``X-ClickHouse-Exception-Code`` header). Errors with no number
are the transport's own: a connection refused, reset or timed out, an answer that is no
ClickHouse answer (a proxy's 502 or 503): all of these wait.

A server's refusal of the user (a wrong password, an unknown user, a missing grant) is a
StoreError, as PostgreSQL's is: writers keep their batches and wait for a person to fix it,
read commands fail with one line. Only an insert can prove a batch wrong, and only by a
number that says its data could not be taken (:data:`PROOF`): our values are checked before
they are sent, so those are rare; a syntax error or an unknown column is ours, not the
batch's, and the batch waits for a fixed tunescope.
"""

from __future__ import annotations

import re

from tunescope.errors import Rejected, SchemaError, StoreError, StoreUnavailable

__all__ = ["PROOF", "WAIT", "code_of", "translate"]

WAIT: dict[int, str] = {
    3: "UNEXPECTED_END_OF_FILE",
    159: "TIMEOUT_EXCEEDED",
    164: "READONLY",
    173: "CANNOT_ALLOCATE_MEMORY",
    202: "TOO_MANY_SIMULTANEOUS_QUERIES",
    203: "NO_FREE_CONNECTION",
    209: "SOCKET_TIMEOUT",
    210: "NETWORK_ERROR",
    236: "ABORTED",
    241: "MEMORY_LIMIT_EXCEEDED",
    242: "TABLE_IS_READ_ONLY",
    243: "NOT_ENOUGH_SPACE",
    252: "TOO_MANY_PARTS",
    279: "ALL_CONNECTION_TRIES_FAILED",
    285: "TOO_FEW_LIVE_REPLICAS",
    286: "UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE",
    319: "UNKNOWN_STATUS_OF_INSERT",
    394: "QUERY_WAS_CANCELLED",
    425: "SYSTEM_ERROR",
    439: "CANNOT_SCHEDULE_TASK",
    999: "KEEPER_EXCEPTION",
}
"""Server errors that waiting may cure: a server or replica that is busy, read-only (a replica
that lost Keeper, a user or server set read-only), full, out of memory, shutting down or
unreachable from the node asked, and a query cut short."""

PROOF: dict[int, str] = {
    6: "CANNOT_PARSE_TEXT",
    26: "CANNOT_PARSE_QUOTED_STRING",
    27: "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
    38: "CANNOT_PARSE_DATE",
    41: "CANNOT_PARSE_DATETIME",
    69: "ARGUMENT_OUT_OF_BOUND",
    70: "CANNOT_CONVERT_TYPE",
    72: "CANNOT_PARSE_NUMBER",
    117: "INCORRECT_DATA",
    131: "TOO_LARGE_STRING_SIZE",
    321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
}
"""Server errors on an insert that prove its data wrong: values that cannot be parsed or held
by their column. Raised on anything but an insert, they are StoreError."""

_SCHEMA = {60: "UNKNOWN_TABLE", 81: "UNKNOWN_DATABASE", 16: "NO_SUCH_COLUMN_IN_TABLE"}
_CODE = re.compile(r"\bCode:\s*(\d+)")
_HTTP_STATUS = re.compile(r"HTTP status (\d{3})")


def code_of(exc: BaseException) -> int | None:
    """The ClickHouse error number of ``exc``, None when it has none (a transport error)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    m = _CODE.search(str(exc))
    return int(m.group(1)) if m else None


def translate(
    exc: BaseException, where: str, *, inserting: bool = False, secret: str | None = None
) -> StoreError:
    """The StoreError for ``exc``, raised by a call to the ClickHouse at ``where`` (its URL as
    shown), in one line without ``secret``. ``inserting``: the call was an insert of a batch's
    rows, the one call whose data :data:`PROOF` errors can prove wrong."""
    text = _one_line(exc, secret)
    code = code_of(exc)
    message = f"{where}: {text}"
    if code is None:
        # no server error: the transport's (refused, reset, timed out, a proxy's 5xx)
        status = _HTTP_STATUS.search(text)
        if status and 400 <= int(status.group(1)) < 500 and status.group(1) not in ("408", "429"):
            return StoreError(message)
        return StoreUnavailable(message)
    if code in WAIT:
        return StoreUnavailable(message)
    if code in _SCHEMA:
        return SchemaError(message)
    if inserting and code in PROOF:
        return Rejected(message)
    return StoreError(message)


def _one_line(exc: BaseException, secret: str | None) -> str:
    lines = [x.strip() for x in str(exc).strip().splitlines() if x.strip()]
    text = "; ".join(lines) or type(exc).__name__
    if secret:
        text = text.replace(secret, "***")
    return text[:2000]
