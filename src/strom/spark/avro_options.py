"""Options of typed (Avro) keys and values, parsed once on the driver (pure functions).

| option | default | meaning |
|---|---|---|
| `valueFormat`, `keyFormat` | `binary` | `avro`: the column is a struct typed by the subject's schema |
| `schema.registry.url` | required with `avro` | the registry, e.g. `http://127.0.0.1:8081` |
| `schema.registry.*` | | other `SchemaRegistryClient` settings (e.g. `basic.auth.user.info`) |
| `valueSubject`, `keySubject` | `<topic>-value`, `<topic>-key` | the subject (TopicNameStrategy) |
| `auto.register.schemas` | `false` | writing: register a schema derived from the Spark type |

The default subject needs a single topic: the `subscribe` option naming one topic or `assign` with one
topic (reading), the `topic` option (writing); otherwise the subject must be given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from strom.spark.options import KafkaOptionError

FORMATS = ("binary", "avro")
_URL = "schema.registry.url"
_PREFIX = "schema.registry."


@dataclass(frozen=True)
class AvroOptions:
    """Which columns are Avro, the registry client settings and the subjects."""

    registry_config: dict[str, str]
    value_subject: str | None  # None: the value column is raw bytes
    key_subject: str | None
    auto_register: bool

    @property
    def enabled(self) -> bool:
        return self.value_subject is not None or self.key_subject is not None


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


def parse_avro_options(options: Mapping[str, str], *, sink: bool) -> AvroOptions:
    """Avro settings from a query's (lower-cased) options.

    Raises:
        KafkaOptionError: an unknown format, `avro` without a registry URL, or no subject to use.
    """
    subjects: dict[str, str | None] = {}
    for column in ("value", "key"):
        if _format(options, f"{column}Format") != "avro":
            subjects[column] = None
            continue
        if not options.get(_URL):
            raise KafkaOptionError(f"{column}Format avro needs the {_URL} option")
        subject = options.get(f"{column}subject")
        if subject is None:
            topic = _single_topic(options, sink=sink)
            if topic is None:
                where = "the topic option" if sink else "one subscribed topic"
                raise KafkaOptionError(
                    f"{column}Format avro: set {column}Subject (the default <topic>-{column} needs {where})"
                )
            subject = f"{topic}-{column}"
        subjects[column] = str(subject)
    config = {k[len(_PREFIX) :]: str(v) for k, v in options.items() if k.startswith(_PREFIX)}
    auto = str(options.get("auto.register.schemas", "false")).strip().lower()
    if auto not in ("true", "false"):
        raise KafkaOptionError(f"auto.register.schemas must be true or false, got {auto!r}")
    return AvroOptions(config, subjects["value"], subjects["key"], auto == "true")
