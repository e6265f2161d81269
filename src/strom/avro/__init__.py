"""Avro decoding shared by the layers that read Confluent wire-format values in bulk: the lake's
translation workers (strom.lake) and Spark's Kafka source (strom.spark). See native_block.py."""
