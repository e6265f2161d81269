"""Confluent Schema Registry's errors: an HTTP status, a numeric ``error_code`` and a message.

The REST layer answers every `RegistryError` as ``{"error_code": code, "message": message}`` with the
status; clients (confluent-kafka's `SchemaRegistryClient`, Karapace's) branch on the code, so the codes
and statuses are Confluent's own.
"""

from __future__ import annotations

MAX_VERSION = 2**31 - 1


class RegistryError(Exception):
    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | str | None = None) -> RegistryError:
    text = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryError(404, 40403, text)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404, 40404, f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently"
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted"
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40406,
        f"Subject '{subject}' Version {version} was soft deleted. Set permanent=true to delete permanently",
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40407,
        f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted",
    )


def subject_config_not_found(subject: str) -> RegistryError:
    return RegistryError(
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
    )


def subject_mode_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(subject: str, messages: list[str]) -> RegistryError:
    detail = "; ".join(messages)
    return RegistryError(
        409,
        409,
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}", '
        f"details: [{detail}]",
    )


def invalid_schema(reason: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {reason}")


def invalid_version(text: str) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{text}' is not a valid version id. "
        f'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility(text: object) -> RegistryError:
    return RegistryError(
        422,
        42203,
        f"Invalid compatibility level {text!r}. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
    )


def invalid_mode(text: object) -> RegistryError:
    return RegistryError(
        422, 42204, f"Invalid mode {text!r}. Valid values are READWRITE, READONLY and IMPORT"
    )


def operation_not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def referenced_by_others(subject: str, version: int) -> RegistryError:
    return RegistryError(
        422, 42206, f"One or more references exist to the schema {{subject={subject}, version={version}}}"
    )


def store_error(message: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend data store: {message}")


def operation_timeout(message: str) -> RegistryError:
    return RegistryError(500, 50002, f"Operation timed out: {message}")


def forwarding_error(message: str) -> RegistryError:
    return RegistryError(500, 50003, f"Error while forwarding the request to the primary: {message}")


def bad_request(status: int, message: str) -> RegistryError:
    """Errors of the HTTP exchange itself (bad JSON, wrong content type, oversized body, no route):
    Confluent answers these with the HTTP status as the error code."""
    return RegistryError(status, status, message)


def parse_version(text: str) -> int | None:
    """A version path segment: a number in [1, 2^31-1], or ``latest`` / ``-1`` (None)."""
    if text in ("latest", "-1"):
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_VERSION:
        raise invalid_version(text)
    return int(text)
