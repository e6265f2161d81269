"""A translation round in a worker process of its own: the broker's interpreter never decodes, builds
Arrow or writes Parquet, so translation never holds the GIL that the broker's event loop needs.

Theory of operation. A broker translating Iceberg topics starts worker processes
(strom.broker.lake.workers), each set up once by `init_worker`: its own `LakeTables` (catalog clients,
one per thread of the process, as in the broker), the parsed registry schemas, a lower CPU priority
(translation is background work with a target lag: the scheduler favours the broker's produce and
fetch over it; the idle scheduling class for the pool the backlog controller uses while the lag is
within its bound, strom.broker.lake.backlog), and Linux's parent-death signal, so that a broker
killed with SIGKILL takes its workers with it. The broker reads a round's whole batches from the
log as it always did and sends them, as the stored bytes with their aborted transactions, in a
`RoundRequest`; `run_round_request` decodes the committed records and runs the round (round.py),
then answers a `RoundResult` (small: offsets and counts).

The registry lives in the broker. A request carries the schemas (type, text by id) the broker has
looked up so far, Protobuf ones compiled by the registry with their imports (or why they do not
compile), and the ids its registry did not know when it last looked (``unknown``). A round
whose values name an id that is in neither commits nothing and answers it in ``missing``: the broker
looks it up and sends the round again. An id the registry does not know is thus the translator's
business as before (translate.py: the round stops before it, or after the broker's patience the
record is a dead letter), never the worker's guess.

A deleted topic's id is forbidden in the worker's `LakeTables` as in the broker's (``dropped``), and
the broker waits for its rounds in flight before dropping its tables, so that no round brings a
dropped table back. A worker killed mid-round is a broker killed mid-round: the next round starts
from the table's offsets.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import struct
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from google.protobuf.descriptor_pb2 import FileDescriptorProto

from strom.lake.columnar import columnar_round
from strom.lake.config_defs import CatalogSettings
from strom.lake.record_columns import committed_columns
from strom.lake.round import Chunk, RoundResult, read_records, write_records
from strom.lake.tables import LakeTables, TableRef
from strom.lake.translate import KEY_VALUE, SchemaCache
from strom.protocol.records.record import Record

# Confluent's wire format: a zero byte, then the schema id (4 bytes, big-endian).
_PREFIX = struct.Struct(">bI")
_PR_SET_PDEATHSIG = 1

# A Protobuf schema as the registry compiled it (its file, and the files it imports by name), or the
# reason it does not compile.
Files = tuple[FileDescriptorProto, Mapping[str, FileDescriptorProto]]
Compiled = Files | str


@dataclass(frozen=True)
class RoundRequest:
    """One partition's round, as the broker hands it to a worker process (pickled)."""

    main: TableRef
    partition: int
    chunks: list[Chunk]
    start: int
    end: int
    give_up_waiting: bool
    schemas: Mapping[int, tuple[str, str]] = field(default_factory=dict)  # looked up: (type, text) by id
    compiled: Mapping[int, Compiled] = field(default_factory=dict)  # the Protobuf ones among them
    unknown: frozenset[int] = frozenset()  # ids the registry did not know when the broker looked
    dropped: frozenset[str] = frozenset()  # ids of deleted topics


class _Worker:
    def __init__(self, settings: CatalogSettings) -> None:
        self.tables = LakeTables(settings)
        self.texts: dict[int, tuple[str, str]] = {}
        self.compiled: dict[int, Compiled] = {}
        self.schemas = SchemaCache(self.texts.get, self._protobuf_files)

    def _protobuf_files(self, schema_id: int) -> Files:
        compiled = self.compiled.get(schema_id, "the broker did not compile it")
        if isinstance(compiled, str):
            raise ValueError(compiled)
        return compiled


_worker: _Worker | None = None


def init_worker(settings: CatalogSettings, niceness: int, idle: bool = False) -> None:
    """The worker process's set-up (its pool's initializer): tied to the broker's life, at a lower
    priority (``idle``: in ``SCHED_IDLE``, or niceness 19 where there is no such class; else
    ``niceness`` above the broker's), then `set_up`."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:
            os._exit(1)  # the broker died before the signal was set
    if idle:
        lower_to_idle()
    else:
        os.nice(niceness)
    set_up(settings)


def lower_to_idle() -> None:
    """This process in the idle scheduling class: it runs only on CPU nothing else wants (and cannot
    leave the class again without privileges: sched(7))."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the lowest niceness there is
        os.nice(19)


def set_up(settings: CatalogSettings) -> None:
    """This process's translation state: its tables and the schemas it has been given."""
    global _worker  # one state per process: what the pool's initializer is for
    _worker = _Worker(settings)


def run_round_request(request: RoundRequest) -> RoundResult:
    """Run one round in this worker process (after `init_worker`)."""
    if _worker is None:
        raise RuntimeError("the translation worker was not initialised")
    worker = _worker
    for topic_id in request.dropped:
        worker.tables.forbid(topic_id)
    worker.compiled.update(request.compiled)  # first: a Protobuf schema's text is parsed with them
    worker.texts.update(request.schemas)
    if request.main.mode != KEY_VALUE:
        columns = committed_columns(request.chunks, request.start, request.end)
        if columns is not None:
            done = columnar_round(worker.tables, request.main, request.partition, columns, worker.schemas)
            if done is not None:
                return done
    records, position = read_records(request.chunks, request.start, request.end)
    schemas: SchemaCache | None = None
    if request.main.mode != KEY_VALUE:
        missing = schema_ids(records) - worker.texts.keys() - request.unknown
        if missing:
            return RoundResult(request.start, 0, 0, None, frozenset(missing))
        schemas = worker.schemas
    return write_records(
        worker.tables, request.main, request.partition, records, position, schemas, request.give_up_waiting
    )


def schema_ids(records: Iterable[Record]) -> set[int]:
    """The schema ids that the records' values name in Confluent's wire format."""
    return {
        _PREFIX.unpack_from(v)[1]
        for r in records
        if (v := r.value) is not None and len(v) >= _PREFIX.size and v[0] == 0
    }
