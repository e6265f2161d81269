"""Reading a broker's ``/metrics`` in tests and benchmarks: prometheus_client's own text parser, so a
malformed exposition fails the reader as it would fail a Prometheus server."""

from __future__ import annotations

import base64
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape_text(http_url: str, timeout_s: float = 10.0, auth: tuple[str, str] | None = None) -> str:
    """``auth``: HTTP Basic user and password (a broker whose HTTP side authenticates)."""
    request = urllib.request.Request(f"{http_url}/metrics")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        text: str = answer.read().decode()
    return text


def parse(text: str) -> Samples:
    """Sample name → {sorted label pairs → value}."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def scrape(http_url: str, timeout_s: float = 10.0, auth: tuple[str, str] | None = None) -> Samples:
    return parse(scrape_text(http_url, timeout_s, auth))


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample with exactly these labels; 0.0 when absent (a counter not yet incremented)."""
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples whose labels include ``labels`` (e.g. over partitions)."""
    wanted = set(labels.items())
    return sum(v for key, v in samples.get(name, {}).items() if wanted <= set(key))
