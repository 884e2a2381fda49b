"""Reusing KV across stateless requests: `prefix_cache` (pure policy: which cached
sequence a prompt takes over, what to evict, the cell budget, cross-worker affinity
hashes) and `parking` (cached prefixes kept in host memory by idle workers)."""
