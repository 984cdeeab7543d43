"""Durable receipts of provider calls and the content-addressed media store.

Imports nothing of ours. Every write is atomic and durable: on a local directory a
temp file, fsync, rename, fsync of the directory; on an S3 bucket an acknowledged
PUT (receipts/objects.py). Every key is derived from ids and digests, never taken
from input.
"""
