"""The transaction coordinator (KIP-98), sans-I/O: transactional ids, producer epochs, the state machine.

`state.py` holds the states and their valid previous states, `records.py` the ``__transaction_state``
key/value layouts and the partition of a transactional id, `coordinator.py` the decisions for
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and timeouts, `ports.py` what the host
provides. The broker (layer 4) appends the records, sends the markers and drives the timers.
"""
