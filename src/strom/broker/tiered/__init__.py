"""The broker's side of tiered storage (KIP-405): its settings, the remote-log metadata topic, and the
remote log manager that copies, expires and deletes remote segments (see each module)."""
