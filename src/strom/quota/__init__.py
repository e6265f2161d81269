"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546, KIP-599), sans-I/O: entities, configs, rates."""
