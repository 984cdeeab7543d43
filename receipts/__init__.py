"""Durable receipts of provider calls and the content-addressed media store.

Imports nothing of ours. Every write is atomic and durable: temp file, fsync,
rename, fsync of the directory. Every path is derived from ids and digests,
never taken from input.
"""
