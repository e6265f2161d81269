"""Options of typed keys and values (Avro, Protobuf, JSON Schema), parsed once on the driver (pure).

Options (default in brackets):

* `valueFormat`, `keyFormat` [`binary`]: `avro`, `protobuf` or `json` makes the column a struct typed by
  the subject's schema.
* `schema.registry.url` (required with a typed format), `schema.registry.*`: the registry and the other
  `SchemaRegistryClient` settings (e.g. `schema.registry.basic.auth.user.info`).
* `valueSubject`, `keySubject`: the subject, given outright.
* `valueSubjectNameStrategy`, `keySubjectNameStrategy` [`topic`]: `topic` (`<topic>-value`), `record`
  (`<record name>`) or `topic-record` (`<topic>-<record name>`).
* `valueRecordName`, `keyRecordName`: the record's (message's, JSON Schema title's) full name, for the
  record strategies; also the name of a derived schema.
* `valueSchemaVersion`, `keySchemaVersion` [latest]: pin the reader (writer) schema to a version of the
  subject; `valueSchemaId`, `keySchemaId`: pin it to a schema id.
* `valueMessage`, `keyMessage` [the file's first message]: Protobuf, which message the column holds.
* `auto.register.schemas` [`false`]: writing, register a schema derived from the Spark type.
* `mode` [`FAILFAST`]: reading, `PERMISSIVE` gives a null struct and a `_corrupt_<column>` column
  (struct<bytes, reason>) instead of failing the task.
* `deadLetterTopic`: streaming reads, undecodable records are written there raw and left out.
* `emit.default.values` [`false`]: Protobuf, unset fields read as their zero value instead of null.

Subject-name strategies are confluent-kafka's: `topic` needs a single topic (the `subscribe` option naming
one topic or `assign` with one topic when reading, the `topic` option when writing); `record` and
`topic-record` need the record name (`valueRecordName`). An explicit subject wins over the strategy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.spark.errors import KafkaOptionError

FORMATS = ("binary", "avro", "protobuf", "json")
STRATEGIES = ("topic", "record", "topic-record")
MODES = ("FAILFAST", "PERMISSIVE")
_URL = "schema.registry.url"
_PREFIX = "schema.registry."


@dataclass(frozen=True)
class ColumnFormat:
    """How one column (key or value) is typed: its format, subject and pinned schema, if any."""

    format: str
    subject: str
    record_name: str | None = None
    version: int | None = None
    schema_id: int | None = None
    message: str | None = None


@dataclass(frozen=True)
class TypedOptions:
    """Which columns are typed, the registry client settings, and how bad records are handled."""

    registry_config: dict[str, str]
    columns: dict[str, ColumnFormat] = field(default_factory=dict)
    auto_register: bool = False
    permissive: bool = False
    dead_letter_topic: str | None = None
    emit_default_values: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.columns)

    @property
    def value_subject(self) -> str | None:
        column = self.columns.get("value")
        return column.subject if column is not None else None

    @property
    def key_subject(self) -> str | None:
        column = self.columns.get("key")
        return column.subject if column is not None else None


def _format(options: Mapping[str, str], name: str) -> str:
    value = str(options.get(name.lower(), "binary")).strip().lower()
    if value not in FORMATS:
        raise KafkaOptionError(f"{name} must be one of {', '.join(FORMATS)}, got {value!r}")
    return value


def _single_topic(options: Mapping[str, str], *, sink: bool) -> str | None:
    if sink:
        topic = options.get("topic")
        return str(topic).strip() if topic else None
    subscribe = options.get("subscribe")
    if subscribe is not None:
        topics = [t.strip() for t in str(subscribe).split(",") if t.strip()]
        return topics[0] if len(topics) == 1 else None
    assign = options.get("assign")
    if assign is not None:
        try:
            parsed = json.loads(str(assign))
        except ValueError:
            return None
        return next(iter(parsed)) if isinstance(parsed, dict) and len(parsed) == 1 else None
    return None


def _optional_int(options: Mapping[str, str], key: str, name: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise KafkaOptionError(f"{name} must be a positive integer, got {text!r}")
    return int(text)


def _subject(options: Mapping[str, str], column: str, fmt: str, *, sink: bool) -> tuple[str, str | None]:
    """(subject, record name) of a typed column by its explicit subject or its naming strategy."""
    record = options.get(f"{column}recordname")
    record = str(record).strip() if record else None
    subject = options.get(f"{column}subject")
    if subject is not None:
        return str(subject), record
    strategy = str(options.get(f"{column}subjectnamestrategy", "topic")).strip().lower()
    for alias, canonical in (("topicnamestrategy", "topic"), ("recordnamestrategy", "record")):
        strategy = canonical if strategy == alias else strategy
    if strategy == "topicrecordnamestrategy":
        strategy = "topic-record"
    if strategy not in STRATEGIES:
        raise KafkaOptionError(
            f"{column}SubjectNameStrategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    topic = _single_topic(options, sink=sink)
    if strategy != "topic" and record is None:
        raise KafkaOptionError(f"{column}SubjectNameStrategy {strategy} needs the {column}RecordName option")
    if strategy != "record" and topic is None:
        where = "the topic option" if sink else "one subscribed topic"
        raise KafkaOptionError(
            f"{column}Format {fmt}: set {column}Subject (the {strategy} strategy needs {where})"
        )
    if strategy == "topic":
        return f"{topic}-{column}", record
    if strategy == "record":
        return str(record), record
    return f"{topic}-{record}", record


def parse_typed_options(options: Mapping[str, str], *, sink: bool) -> TypedOptions:
    """Typed-column settings from a query's (lower-cased) options.

    Raises:
        KafkaOptionError: an unknown format, strategy or mode, a typed format without a registry URL, no
            subject to use, a bad pinned version or id, or a dead-letter topic on a sink or without a typed
            column (batch reads refuse it in the source).
    """
    columns: dict[str, ColumnFormat] = {}
    for column in ("value", "key"):
        fmt = _format(options, f"{column}Format")
        if fmt == "binary":
            continue
        if not options.get(_URL):
            raise KafkaOptionError(f"{column}Format {fmt} needs the {_URL} option")
        subject, record = _subject(options, column, fmt, sink=sink)
        version = _optional_int(options, f"{column}schemaversion", f"{column}SchemaVersion")
        schema_id = _optional_int(options, f"{column}schemaid", f"{column}SchemaId")
        if version is not None and schema_id is not None:
            raise KafkaOptionError(f"Set {column}SchemaVersion or {column}SchemaId, not both")
        message = options.get(f"{column}message")
        columns[column] = ColumnFormat(
            fmt, subject, record, version, schema_id, str(message).strip() if message else None
        )
    config = {k[len(_PREFIX) :]: str(v) for k, v in options.items() if k.startswith(_PREFIX)}
    auto = str(options.get("auto.register.schemas", "false")).strip().lower()
    if auto not in ("true", "false"):
        raise KafkaOptionError(f"auto.register.schemas must be true or false, got {auto!r}")
    mode = str(options.get("mode", "FAILFAST")).strip().upper()
    if mode not in MODES:
        raise KafkaOptionError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    dead_letter = options.get("deadlettertopic")
    if dead_letter is not None and sink:
        raise KafkaOptionError("deadLetterTopic applies to streaming reads only")
    if dead_letter is not None and not columns:
        raise KafkaOptionError("deadLetterTopic needs a typed valueFormat or keyFormat")
    emit = str(options.get("emit.default.values", "false")).strip().lower()
    return TypedOptions(
        config,
        columns,
        auto == "true",
        permissive=mode == "PERMISSIVE" and dead_letter is None,
        dead_letter_topic=str(dead_letter).strip() if dead_letter else None,
        emit_default_values=emit == "true",
    )
