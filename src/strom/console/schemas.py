"""``strom schemas``: a schema registry client over its REST API (Confluent's, served by every broker).

Plain HTTP with the standard library: JSON bodies with the registry's content type
``application/vnd.schemaregistry.v1+json``. Every failure becomes one `ConsoleError` line: the
registry's own ``error_code`` and message, or why the registry could not be reached.

Credentials for a registry that authenticates (a broker with SASL listeners, or
``http.authentication.method=BASIC``) are HTTP Basic, as Confluent's clients send them with
``basic.auth.user.info``: ``$STROM_SCHEMA_REGISTRY_USER_INFO`` = ``user:password`` (kept out of the
command line, where other users of the machine could read it). An ``https://`` registry's certificate is
checked against the system's CAs, or against ``$STROM_SCHEMA_REGISTRY_CA`` (a PEM file: a private CA, as
``schema.registry.ssl.truststore.location`` is for Confluent's clients); an untrusted certificate is said so.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, TypedDict, cast

from strom.console.errors import ConsoleError

DEFAULT_REGISTRY = "http://localhost:8081"
REGISTRY_ENV = "STROM_SCHEMA_REGISTRY"
USER_INFO_ENV = "STROM_SCHEMA_REGISTRY_USER_INFO"
CA_ENV = "STROM_SCHEMA_REGISTRY_CA"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryClient:
    def __init__(self, url: str, timeout_s: float = 30.0, user_info: str | None = None) -> None:
        """``user_info``: ``user:password`` for HTTP Basic (default: ``$STROM_SCHEMA_REGISTRY_USER_INFO``)."""
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        info = os.environ.get(USER_INFO_ENV) if user_info is None else user_info
        self._authorization = "Basic " + base64.b64encode(info.encode()).decode() if info else None
        ca = os.environ.get(CA_ENV)
        try:
            self._tls = ssl.create_default_context(cafile=ca) if ca else None
        except (OSError, ssl.SSLError) as exc:
            raise ConsoleError(f"cannot read ${CA_ENV} ({ca}): {exc}") from None

    def request(self, method: str, path: str, body: Any = None, **query: object) -> Any:
        params = {
            k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in query.items() if v is not None
        }
        url = self.url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", CONTENT_TYPE)
        if self._authorization is not None:
            request.add_header("Authorization", self._authorization)
        if data is not None:
            request.add_header("Content-Type", CONTENT_TYPE)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._tls) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise ConsoleError(_error_line(exc.code, exc.read())) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise ConsoleError(
                    f"the schema registry at {self.url} has a certificate this machine does not trust "
                    f"({reason.verify_message}): point ${CA_ENV} at the PEM file of the CA that signed it"
                ) from None
            raise ConsoleError(
                f"cannot reach the schema registry at {self.url}: {reason} (every broker serves it on its "
                "http.listeners, default http://127.0.0.1:8081: start one with 'strom serve', or point "
                "--registry or $STROM_SCHEMA_REGISTRY at one)"
            ) from None
        try:
            return json.loads(payload) if payload else None
        except ValueError:
            raise ConsoleError(f"{self.url} did not answer JSON; is it a schema registry?") from None


def _error_line(status: int, payload: bytes) -> str:
    try:
        body = json.loads(payload)
        return f"{body['message']} (error code {body['error_code']})"
    except (ValueError, KeyError, TypeError):
        return f"the schema registry answered HTTP {status}"


def _subject(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def schema_type_of(path: str, given: str | None) -> str:
    """The schema type to send: ``--type`` when given, else from the file name (``.proto``: PROTOBUF)."""
    if given is not None:
        return given.upper()
    return "PROTOBUF" if path.endswith(".proto") else "AVRO"


def read_schema(path: str, schema_type: str = "AVRO") -> str:
    """A schema file's text ('-': standard input), checked to be JSON unless it is Protobuf source."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConsoleError(f"cannot read {path}: {exc.strerror or exc}") from None
    if schema_type == "PROTOBUF":
        return text
    try:
        json.loads(text)
    except ValueError as exc:
        raise ConsoleError(f"{path} is not JSON: {exc}") from None
    return text


def list_subjects(client: RegistryClient, deleted: bool) -> list[str]:
    return list(client.request("GET", "/subjects", deleted=deleted))


def list_versions(client: RegistryClient, subject: str, deleted: bool) -> list[int]:
    return list(client.request("GET", f"/subjects/{_subject(subject)}/versions", deleted=deleted))


class SchemaAnswer(TypedDict, total=False):
    """The registry's answer to a schema or subject-version lookup (fields as Confluent names them)."""

    subject: str
    version: int
    id: int
    schema: str
    schemaType: str


class CompatibilityAnswer(TypedDict, total=False):
    """The registry's answer to a verbose compatibility check."""

    is_compatible: bool
    messages: list[str]


def get_version(client: RegistryClient, subject: str, version: str) -> SchemaAnswer:
    return cast(
        SchemaAnswer,
        dict(client.request("GET", f"/subjects/{_subject(subject)}/versions/{_subject(version)}")),
    )


def get_by_id(client: RegistryClient, schema_id: int) -> SchemaAnswer:
    return cast(SchemaAnswer, dict(client.request("GET", f"/schemas/ids/{schema_id}")))


def register(client: RegistryClient, subject: str, schema: str, schema_type: str) -> int:
    body = {"schema": schema, "schemaType": schema_type}
    return int(client.request("POST", f"/subjects/{_subject(subject)}/versions", body)["id"])


def check(
    client: RegistryClient, subject: str, schema: str, version: str | None, schema_type: str = "AVRO"
) -> CompatibilityAnswer:
    path = f"/compatibility/subjects/{_subject(subject)}/versions"
    if version is not None:
        path += f"/{_subject(version)}"
    answer = client.request("POST", path, {"schema": schema, "schemaType": schema_type}, verbose=True)
    return cast(CompatibilityAnswer, dict(answer))


def schema_text(found: SchemaAnswer) -> str:
    """A schema for a terminal: JSON (Avro, JSON Schema) indented, Protobuf source as stored."""
    if found.get("schemaType", "AVRO") == "PROTOBUF":
        return str(found["schema"]).rstrip("\n")
    return json.dumps(json.loads(found["schema"]), indent=2)


def config(client: RegistryClient, subject: str | None, level: str | None, delete: bool) -> str:
    path = "/config" if subject is None else f"/config/{_subject(subject)}"
    if delete:
        return str(client.request("DELETE", path)["compatibilityLevel"])
    if level is not None:
        return str(client.request("PUT", path, {"compatibility": level.upper()})["compatibility"])
    return str(client.request("GET", path, defaultToGlobal=True if subject else None)["compatibilityLevel"])


def delete(client: RegistryClient, subject: str, version: str | None, permanent: bool) -> list[int]:
    path = f"/subjects/{_subject(subject)}"
    if version is not None:
        return [int(client.request("DELETE", f"{path}/versions/{_subject(version)}", permanent=permanent))]
    return [int(v) for v in client.request("DELETE", path, permanent=permanent)]
