"""Kafka's sasl.jaas.config syntax."""

from __future__ import annotations

import pytest

from strom._util.errors import ConfigError
from strom.broker.security.jaas import parse_jaas


def test_kafka_plain_example() -> None:
    entry = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
    )
    assert entry.module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options["username"] == "admin"
    assert entry.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}


def test_quotes_escapes_words_and_comments() -> None:
    entry = parse_jaas(
        "/* broker */ a.b.C Optional // one line\n"
        'k1=\'single\' k2="with \\"quote\\" and ; = " k3=bare.word-1 k4="" ;  '
    )
    assert entry.flag == "optional"
    assert entry.options == {"k1": "single", "k2": 'with "quote" and ; = ', "k3": "bare.word-1", "k4": ""}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Module required",
        'Module required user_a="x"',
        'Module always user_a="x";',
        'Module required user_a="x"; Other required;',
        "Module required user_a=;",
        'Module required ="x";',
        'Module required user_a="x;',
        "Module required /* open",
    ],
)
def test_malformed_configs_are_refused_without_quoting_values(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_jaas(text)
    assert '"x"' not in str(info.value)
