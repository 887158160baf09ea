"""The KV cache beyond one step: prefix reuse, the host-memory tier, SWA checkpoints, saved prefix
states, and the cache sized to a memory bound."""
