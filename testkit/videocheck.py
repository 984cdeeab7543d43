"""Reading a lesson video back, for the tests that check one: how long a sound lasts, the picture shown at a moment,
and how far two pictures are apart."""

from __future__ import annotations

import io

import av
from PIL import Image, ImageChops, ImageOps, ImageStat


def seconds_of(audio: bytes) -> float:
    with av.open(io.BytesIO(audio)) as container:
        return sum(frame.samples / frame.sample_rate for frame in container.decode(audio=0))


def frame_at(mp4: bytes, seconds: float) -> Image.Image:
    with av.open(io.BytesIO(mp4)) as container:
        for frame in container.decode(container.streams.video[0]):
            if frame.time + 1e-6 >= seconds:
                return frame.to_image()
    raise AssertionError(f"no frame at {seconds} s")


def difference(a: Image.Image, b: Image.Image) -> float:
    """The mean difference of two pictures' pixels, 0 to 255."""
    return sum(ImageStat.Stat(ImageChops.difference(a.convert("RGB"), b.convert("RGB"))).mean) / 3


def shows_each_picture_during_its_narration(mp4: bytes, pictures: list[bytes], narrations: list[bytes],
                                            size: tuple[int, int]) -> list[list[float]]:
    """For the frame in the middle of each narration, its distance to every picture (fitted to the video as the
    renderer fits it); the test asserts that the nearest is the block's own."""
    fitted = [ImageOps.pad(Image.open(io.BytesIO(p)).convert("RGB"), size, color=(0, 0, 0)) for p in pictures]
    start, rows = 0.0, []
    for narration in narrations:
        length = seconds_of(narration)
        shown = frame_at(mp4, start + length / 2)
        rows.append([difference(shown, f) for f in fitted])
        start += length
    return rows


def duration_of(mp4: bytes) -> float:
    with av.open(io.BytesIO(mp4)) as container:
        return container.duration / av.time_base
