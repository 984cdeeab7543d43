"""The fake's answers: small real images and tones that differ per execution."""

from __future__ import annotations

import io
import math
import struct
import wave
import zlib


def tiny_png(seed: int) -> bytes:
    """An 8x8 RGB PNG of one colour chosen by `seed`, built with zlib only."""
    colour = bytes(((seed * 67) % 256, (seed * 131 + 40) % 256, (seed * 29 + 90) % 256))
    raw = b"".join(b"\x00" + colour * 8 for _ in range(8))

    def chunk(tag: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", zlib.crc32(tag + payload))

    header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def tiny_image(seed: int, output_format: str = "png") -> bytes:
    """The seed's picture as PNG, JPEG or WebP (the GPT image models' `output_format`)."""
    png = tiny_png(seed)
    if output_format == "png":
        return png
    from PIL import Image

    buffer = io.BytesIO()
    Image.open(io.BytesIO(png)).save(buffer, format=output_format.upper())
    return buffer.getvalue()


def tiny_wav(seed: int, seconds: float = 0.2, rate: int = 22050) -> bytes:
    """A short 16-bit mono sine tone whose pitch is chosen by `seed`."""
    pitch = 330 + 10 * (seed % 50)
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * pitch * n / rate))) for n in range(int(seconds * rate))
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    return buffer.getvalue()
