"""librdkafka's protocol debug lines, captured to check which request versions a real client sent."""

from __future__ import annotations

import logging
import uuid


class ProtocolLog(logging.Handler):
    """librdkafka's debug lines (``debug=protocol``), kept to check the versions it negotiated."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def logger(self) -> logging.Logger:
        logger = logging.getLogger(f"strom.test.librdkafka.{uuid.uuid4().hex[:8]}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(self)
        return logger

    def sent(self, request: str) -> list[str]:
        return [line for line in self.lines if f"Sent {request}Request" in line]
