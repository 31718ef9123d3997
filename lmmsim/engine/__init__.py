"""SimPy engines: replicas stepping batches, the KV-cache block pool, the run loop."""
