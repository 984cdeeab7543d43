"""Benchmarks: scripts that print tables (see docs/performance.md). Not tests; nothing here is imported by the
pipeline."""
