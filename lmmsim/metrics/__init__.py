"""Metrics: per-request records as frames, and the run summary."""
