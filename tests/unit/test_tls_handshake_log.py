"""The failed-handshake log's rate limit (strom.broker.security.tls_accept.HandshakeLog)."""

from __future__ import annotations

import logging
import ssl

import pytest

from strom.broker.security.tls_accept import HandshakeLog, failure_reason


def test_a_burst_per_window_then_a_count_of_what_was_left_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="strom.broker.security.tls_accept")
    limited = HandshakeLog("SSL", burst=3, window_s=10.0)
    logged = [
        limited.failed(f"10.0.0.1:{port}", "WRONG_VERSION_NUMBER", now_s=port / 10) for port in range(50)
    ]
    assert logged == [True] * 3 + [False] * 47
    assert limited.failed("10.0.0.2:1", "HTTP_REQUEST", now_s=10.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:3] == [
        f"TLS handshake from 10.0.0.1:{p} on SSL failed: WRONG_VERSION_NUMBER" for p in range(3)
    ]
    assert (
        lines[3]
        == "TLS handshake from 10.0.0.2:1 on SSL failed: HTTP_REQUEST (47 more failed since the last line)"
    )
    assert limited.failures == 51 and limited.suppressed == 0


def test_reasons_name_the_failure_not_the_bytes() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.reason, verify.verify_message = "CERTIFICATE_VERIFY_FAILED", "certificate has expired"
    assert failure_reason(verify) == "CERTIFICATE_VERIFY_FAILED (certificate has expired)"
    assert failure_reason(TimeoutError()) == "no complete handshake within the time limit"
    assert (
        failure_reason(ConnectionResetError())
        == "connection closed during the handshake (ConnectionResetError)"
    )
