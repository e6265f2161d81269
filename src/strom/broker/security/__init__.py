"""Kafka's security model for the broker: listeners and their security protocols (`listeners`), TLS
from PEM files (`tls`), SASL PLAIN and SCRAM (`jaas`, `scram`, `sasl`, `credentials`) and the principal
an authenticated connection carries (``User:ANONYMOUS``, ``User:<name>``, ``User:CN=...``)."""
