"""`PresignedRanges`: ranges of S3 objects read into buffers over presigned GET URLs (the remote reads).

Why not botocore's GetObject for these: the remote reads of tiered storage are many ranged GETs of
megabytes each, issued by threads that share the interpreter's lock with the broker's event loop, and
botocore's request pipeline (endpoint rules, event hooks, signing, and parsing the answer's headers
into a typed dict, its dates with dateutil) costs about 1.9 ms of CPU per GetObject, against about
0.8 ms for a GET of a presigned URL over urllib3 (measured against SeaweedFS on loopback: 0.45 against
0.31 CPU seconds per GB read in 8 MiB ranges). Puts, deletes, lists and whole-object gets stay with
botocore.

Theory of operation. A presigned URL for a key (SigV4 in the query string, made by the store's own
botocore client with its credentials, valid `_URL_LIFETIME_S`) is made once and reused for every range
of that object until it is near its expiry (a bounded set of them, least recently used dropped); the
``Range`` header is not part of the signature, so one URL serves every range. Requests go through one
urllib3 connection pool per store (its size: the store's threads), with the store's connect and read
timeouts and its retries: connection failures, read failures and 429/5xx answers are retried up to
``max_attempts`` in all, with exponential backoff and jitter (urllib3's ``Retry``, which honours
``Retry-After``). Answers: 206 (or 200 for a range from 0) is read from the socket straight into the
buffers, and the connection goes back to the pool; 416 means nothing at or past the object's end; 404
is `ObjectNotFoundError`; a 403 gets the URL made afresh once (credentials rotated), then is refused;
anything else, or a body cut short, is `ObjectStoreUnavailableError` (retriable). The caller runs
`read_into` on one of its threads (it blocks).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import urllib3

from strom.objectstore.s3_settings import S3Settings
from strom.objectstore.store import ObjectNotFoundError, ObjectStoreUnavailableError

_URL_LIFETIME_S = 900
_RENEW_BEFORE_S = 120  # a URL is made afresh this long before it would expire
_URLS_KEPT = 1024
_RETRY_STATUSES = (429, 500, 502, 503, 504)


class PresignedRanges:
    def __init__(self, client: Any, settings: S3Settings) -> None:
        self._client = client  # botocore's S3 client: it signs, never sends
        self._bucket = settings.bucket
        self._urls: OrderedDict[str, tuple[str, float]] = OrderedDict()  # key -> (url, renew at)
        self._lock = threading.Lock()  # the store's threads share the URLs
        self._http = urllib3.PoolManager(
            maxsize=settings.threads,
            timeout=urllib3.Timeout(
                connect=settings.connect_timeout_ms / 1000, read=settings.read_timeout_ms / 1000
            ),
            retries=urllib3.Retry(
                total=max(settings.max_attempts - 1, 0),
                backoff_factor=0.1,
                backoff_jitter=0.1,
                status_forcelist=_RETRY_STATUSES,
                allowed_methods=frozenset({"GET"}),
                raise_on_status=False,
                redirect=0,
            ),
        )

    def close(self) -> None:
        self._http.clear()

    def _url(self, key: str, afresh: bool) -> str:
        now = time.monotonic()
        with self._lock:
            found = self._urls.get(key)
            if found is not None and not afresh and now < found[1]:
                self._urls.move_to_end(key)
                return found[0]
        url: str = self._client.generate_presigned_url(
            "get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=_URL_LIFETIME_S
        )
        with self._lock:
            self._urls[key] = (url, now + _URL_LIFETIME_S - _RENEW_BEFORE_S)
            self._urls.move_to_end(key)
            while len(self._urls) > _URLS_KEPT:
                self._urls.popitem(last=False)
        return url

    def read_into(self, key: str, start: int, buffers: Sequence[memoryview]) -> int:
        """Fill ``buffers`` in order from the object ``key`` (the full key, prefix included) at
        ``start``; returns the bytes read (fewer only at the object's end). Blocking."""
        total = sum(len(buffer) for buffer in buffers)
        if total == 0:
            return 0
        headers = {"Range": f"bytes={start}-{start + total - 1}"}
        where = f"s3://{self._bucket}/{key}"
        for afresh in (False, True):
            try:
                answer = self._http.request(
                    "GET", self._url(key, afresh), headers=headers, preload_content=False
                )
            except urllib3.exceptions.HTTPError as exc:
                raise ObjectStoreUnavailableError(f"{where}: {exc}") from exc
            status = answer.status
            if status == 206 or (status == 200 and start == 0):
                length = int(answer.headers.get("Content-Length", total))
                return read_response_into(answer, min(length, total), buffers)
            _drop(answer)  # an error's body is not read: its connection is not reused
            if status == 416:
                return 0
            if status == 404:
                raise ObjectNotFoundError(where)
            if status != 403:
                break
        raise ObjectStoreUnavailableError(f"{where}: the server answered HTTP {status}")


def read_response_into(answer: Any, length: int, buffers: Sequence[memoryview]) -> int:
    """Read the first ``length`` bytes of a urllib3 response's body into ``buffers`` (in order);
    returns ``length``. urllib3's own ``readinto`` reads a ``bytes`` object and copies it into the
    buffer; the ``http.client`` response beneath it reads from the socket straight into the buffer.
    A body read whole gives its connection back to the pool; otherwise the connection is closed.

    Raises:
        ObjectStoreUnavailableError: the body ended early (the connection dropped).
    """
    socket_reader: Any = getattr(answer, "_fp", None)  # http.client's response, over the socket
    direct = hasattr(socket_reader, "readinto") and hasattr(socket_reader, "isclosed")
    source: Any = socket_reader if direct else answer
    got = 0
    try:
        for buffer in buffers:
            want = min(len(buffer), length - got)
            filled = 0
            while filled < want:
                n = source.readinto(buffer[filled:want])
                if not n:
                    raise ObjectStoreUnavailableError(
                        f"the answer ended after {got + filled} of {length} bytes"
                    )
                filled += n
            got += filled
            if got == length:
                break
    except OSError as exc:  # a read timeout, a reset
        _drop(answer)
        raise ObjectStoreUnavailableError(f"reading the answer: {exc}") from exc
    except BaseException:
        _drop(answer)
        raise
    if direct and socket_reader.isclosed():
        answer.release_conn()  # the body read whole (http.client closes itself at its end)
    else:
        _drop(answer)  # bytes may be left unread (an answer longer than asked for)
    return got


def _drop(answer: Any) -> None:
    """Close the answer's connection (it is not reused) and give its place back to the pool."""
    answer.close()
    answer.release_conn()
