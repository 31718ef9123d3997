"""Workload generation: arrivals, request mixes, media token rules, traces."""
