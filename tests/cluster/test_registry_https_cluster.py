"""The schema registry of a 2-broker cluster on ``https://`` listeners with a private CA: a write sent
to the broker that is not the writer is forwarded to the writer over HTTPS, checked against the
configured trust store (not the system's CAs), and reads agree on both brokers."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.certs import make_pki

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _call(context: ssl.SSLContext, url: str, method: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_writes_forwarded_to_the_writer_over_https_with_the_private_ca(
    make_cluster: Any, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster: LocalCluster = make_cluster(
        2,
        offsets_topic_replication_factor="1",
        http_listeners="https://127.0.0.1:0",
        ssl_keystore_location=str(pki.broker),
        ssl_truststore_location=str(pki.ca),
    )
    urls = {i: str(b.http_url) for i, b in cluster.brokers.items()}
    assert all(url.startswith("https://") for url in urls.values())
    client = ssl.create_default_context(cafile=str(pki.ca))
    schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "f", "type": "int"}]})
    # The first write creates _schemas; then find the broker that is not its leader (the writer).
    status, body = wait_until(
        lambda: (
            (answer := _call(client, urls[0] + "/subjects/first/versions", "POST", {"schema": schema}))[0]
            == 200
            and answer
        ),
        what="a first registration",
    )
    writer = partitions_of(cluster.bootstrap, "_schemas")[0][0]
    follower = 1 - writer
    other = json.dumps({"type": "record", "name": "S", "fields": [{"name": "g", "type": "long"}]})
    status, body = _call(client, urls[follower] + "/subjects/forwarded/versions", "POST", {"schema": other})
    assert status == 200, body  # a forward checked against the system CAs would fail: 50003
    schema_id = body["id"]
    for url in urls.values():
        status, found = _call(client, f"{url}/schemas/ids/{schema_id}", "GET")
        assert status == 200 and json.loads(found["schema"]) == json.loads(other)
