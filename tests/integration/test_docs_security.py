"""The ACL walk-through in docs/security.md runs as written: its properties start a broker (ports
replaced by free ones) and its shell blocks (Kafka's ACLs, then the HTTP side's) run with ``strom`` from
this checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from strom.testing.broker_process import BrokerProcess
from tests.integration.doc_blocks import DOCS, block

DOC = DOCS / "security.md"


def test_acl_walkthrough_runs_as_written(tmp_path: Path) -> None:
    props = dict(
        line.split("=", 1)
        for line in block(DOC, "properties", "## Authorization (ACLs)").splitlines()
        if line
    )
    props["listeners"] = "INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0"
    with BrokerProcess(tmp_path / "b", props) as broker:
        script = block(DOC, "sh", "Started with `strom serve --config broker-acls.properties`")
        script += block(DOC, "sh", "Continuing the walk-through above")  # ACLs on the HTTP side
        script = script.replace("127.0.0.1:9093", broker.listeners["CLIENT"])
        script = script.replace("http://127.0.0.1:8081", str(broker.http_url))
        prelude = f'strom() {{ "{sys.executable}" -m strom.cli.main "$@"; }}\nset -e\n'
        done = subprocess.run(["bash", "-c", prelude + script], capture_output=True, timeout=120, check=False)
        out = done.stdout.decode()
        assert done.returncode == 0, done.stderr.decode()
        assert "hello" in out and "refused" not in out
        assert "authoriz" in done.stderr.decode().lower(), done.stderr.decode()
        assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in out
        assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in out
        # The HTTP side: alice registers under the subject she may write, sees only it, may not delete
        # it, browses the topic she may read, and may not scrape /metrics.
        assert '{"id": 1}' in out.replace('{"id":1}', '{"id": 1}')
        assert '["orders-value"]' in out.replace(" ", "")
        assert out.count("403") == 2 and "200" in out
        assert "ResourcePattern(resourceType=Subject, name=orders-value, patternType=LITERAL)" in out
