"""``strom users`` against a broker with a SASL_PLAINTEXT listener: create, describe, log in, alter,
delete; credentials survive a restart (embedded mode keeps them in the log dir)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from strom.testing.broker_process import BrokerProcess
from tests.integration.secure_clients import Security, kcat_args, roundtrip

STROM = [sys.executable, "-m", "strom.cli.main"]


def _users(bootstrap: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STROM, "--bootstrap-server", bootstrap, "users", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _login_fails(bootstrap: str, sec: Security) -> bool:
    done = subprocess.run(
        [*kcat_args(bootstrap, sec), "-L", "-m", "5"], capture_output=True, timeout=30, check=False
    )
    return done.returncode != 0


def test_users_cli_lifecycle(tmp_path: Path) -> None:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    }
    with BrokerProcess(tmp_path / "b", overrides) as broker:
        plain, sasl = broker.bootstrap, broker.listeners["SASL_PLAINTEXT"]
        created = _users(plain, "create", "alice", "--mechanism", "SCRAM-SHA-512", stdin="first-pass\n")
        assert created.returncode == 0, created.stderr
        again = _users(plain, "create", "alice", stdin="x\n")
        assert again.returncode != 0 and "already exists" in again.stderr
        described = _users(plain, "describe")
        assert described.stdout == "User: alice\tMechanism: SCRAM-SHA-512\tIterations: 8192\n"
        alice = Security("SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", username="alice", password="first-pass")
        roundtrip("confluent-kafka", sasl, alice, count=2)
        password_file = tmp_path / "pw"
        missing = _users(plain, "alter", "alice", "--password-file", str(password_file))
        assert missing.returncode == 1 and missing.stderr.startswith("strom: error: cannot read the password")
        password_file.write_text("second-pass\n")
        altered = _users(
            plain, "alter", "alice", "--password-file", str(password_file), "--iterations", "4096"
        )
        assert altered.returncode == 0, altered.stderr
        assert _login_fails(sasl, alice)
        broker.restart()
        sasl = broker.listeners["SASL_PLAINTEXT"]
        rotated = Security(**{**alice.__dict__, "password": "second-pass"})
        roundtrip("kcat", sasl, rotated, count=2)
        low = _users(broker.bootstrap, "alter", "alice", "--iterations", "100", stdin="x\n")
        assert low.returncode != 0 and "UNACCEPTABLE_CREDENTIAL" in low.stderr.upper().replace(" ", "_")
        deleted = _users(broker.bootstrap, "delete", "alice")
        assert deleted.returncode == 0, deleted.stderr
        assert _users(broker.bootstrap, "describe").stdout == ""
        assert _login_fails(sasl, rotated)
