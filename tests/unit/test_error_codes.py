"""`ErrorCode.retriable` against Kafka's own classification, as the installed kafka-python records it."""

from __future__ import annotations

import inspect

import kafka.errors

from strom.protocol.errors import COORDINATOR_ERRORS, ErrorCode

#: Kafka's ``CorruptRecordException`` is a ``RetriableException``; kafka-python marks it final.
KAFKA_PYTHON_DIFFERS = {ErrorCode.CORRUPT_MESSAGE}


def _kafka_python_retriable() -> dict[int, bool]:
    return {
        int(cls.errno): bool(cls.retriable)
        for _, cls in inspect.getmembers(kafka.errors, inspect.isclass)
        if issubclass(cls, kafka.errors.BrokerResponseError) and isinstance(getattr(cls, "errno", None), int)
    }


def test_every_code_both_know_is_classified_as_kafka_classifies_it() -> None:
    theirs = _kafka_python_retriable()
    compared = [code for code in ErrorCode if code in theirs and code not in KAFKA_PYTHON_DIFFERS]
    assert len(compared) > 100  # kafka-python knows most codes: the comparison is not vacuous
    differ = [code.name for code in compared if code.retriable != theirs[code]]
    assert differ == []
    assert ErrorCode.CORRUPT_MESSAGE.retriable


def test_the_coordinator_errors_are_retriable_and_the_final_ones_are_not() -> None:
    assert all(code.retriable for code in COORDINATOR_ERRORS)
    for final in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNKNOWN_SERVER_ERROR):
        assert not final.retriable
