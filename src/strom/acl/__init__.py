"""Kafka's access control lists, sans-I/O: the model (`model.py`), the decision (`authorizer.py`) and the
ZooKeeper znode layouts (`zk_format.py`). The broker stores, distributes and enforces them."""
