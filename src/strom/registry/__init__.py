"""The schema registry's domain, sans-I/O: subjects, versions, ids, Avro compatibility, ``_schemas`` records.

The broker hosts it (`strom.broker.coordinators.registry_service` appends its records to ``_schemas``
and replays them; `strom.web.registry_api` serves Confluent's REST API); nothing here does I/O.
"""
