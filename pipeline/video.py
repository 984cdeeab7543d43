"""The narrated lesson video of a version: each block's image for as long as its narration, H.264 and AAC in MP4,
and the blocks' texts as WebVTT captions. Local work (no provider, nothing paid), made with PyAV, whose wheel
carries FFmpeg's libraries: no system ffmpeg.

The narrations are decoded and joined sample for sample, so the video lasts exactly as long as they do together
(the last picture is held to the next whole frame). A block's picture appears on the first frame at or after its
narration starts; its caption runs from the start of its narration to its end.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
from PIL import Image, ImageOps

AUDIO_RATE = 48_000
AUDIO_LAYOUT = "mono"


@dataclass(frozen=True)
class Scene:
    """One block: its picture (image bytes), its narration (audio bytes in any format FFmpeg reads), its text."""

    image: bytes
    audio: bytes
    text: str


@dataclass(frozen=True)
class Cue:
    start: float   # seconds
    end: float
    text: str


@dataclass(frozen=True)
class Rendered:
    duration: float   # seconds: the narrations' sum
    cues: tuple[Cue, ...]


def render(scenes: list[Scene], out: Path, *, width: int = 1280, height: int = 720, fps: int = 12) -> Rendered:
    """Write the MP4 of `scenes` to `out`; what it holds, with its captions' times."""
    if not scenes:
        raise ValueError("a video needs at least one scene")
    narrations = [_decoded(scene.audio) for scene in scenes]
    starts, total = [], 0
    for frames in narrations:
        starts.append(total)
        total += sum(frame.samples for frame in frames)
    cues = tuple(Cue(start / AUDIO_RATE, (start + sum(f.samples for f in frames)) / AUDIO_RATE, scene.text)
                 for scene, start, frames in zip(scenes, starts, narrations))
    with av.open(str(out), "w", format="mp4", options={"movflags": "+faststart"}) as container:
        video = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast", "crf": "23",
                                                                    "tune": "stillimage"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.codec_context.thread_count = 1
        audio = container.add_stream("aac", rate=AUDIO_RATE, layout=AUDIO_LAYOUT)
        _encode_pictures(container, video, scenes, cues, fps, width, height, total / AUDIO_RATE)
        _encode_narrations(container, audio, narrations)
    return Rendered(total / AUDIO_RATE, cues)


def _decoded(data: bytes) -> list[av.AudioFrame]:
    """A narration as frames of AUDIO_RATE mono float samples."""
    resampler = av.AudioResampler(format="fltp", layout=AUDIO_LAYOUT, rate=AUDIO_RATE)
    frames = []
    with av.open(io.BytesIO(data)) as source:
        for frame in source.decode(audio=0):
            frame.pts = None
            frames += resampler.resample(frame)
    frames += resampler.resample(None)
    if not frames:
        raise ValueError("a narration without sound")
    return frames


def _encode_pictures(container, stream, scenes: list[Scene], cues: tuple[Cue, ...], fps: int, width: int,
                     height: int, duration: float) -> None:
    count = max(1, math.ceil(duration * fps - 1e-9))
    scene, picture = -1, None
    for index in range(count):
        at = index / fps
        while scene + 1 < len(cues) and cues[scene + 1].start <= at + 1e-9:
            scene += 1
            picture = _picture(scenes[scene].image, width, height)
        picture.pts = index
        picture.time_base = Fraction(1, fps)
        for packet in stream.encode(picture):
            container.mux(packet)
    for packet in stream.encode(None):
        container.mux(packet)


def _picture(data: bytes, width: int, height: int) -> av.VideoFrame:
    with Image.open(io.BytesIO(data)) as image:
        fitted = ImageOps.pad(image.convert("RGB"), (width, height), color=(0, 0, 0))
    return av.VideoFrame.from_image(fitted).reformat(format="yuv420p")


def _encode_narrations(container, stream, narrations: list[list[av.AudioFrame]]) -> None:
    fifo = av.AudioFifo()
    for frames in narrations:
        for frame in frames:
            frame.pts = None
            fifo.write(frame)
    size = stream.codec_context.frame_size or 1024
    pts = 0
    while fifo.samples:
        chunk = fifo.read(min(size, fifo.samples))
        chunk.pts, chunk.time_base = pts, Fraction(1, AUDIO_RATE)
        pts += chunk.samples
        for packet in stream.encode(chunk):
            container.mux(packet)
    for packet in stream.encode(None):
        container.mux(packet)


def webvtt(cues: tuple[Cue, ...]) -> str:
    """The captions as a WebVTT file: one cue per block, its text as written (a cue may not hold '-->')."""
    lines = ["WEBVTT", ""]
    for number, cue in enumerate(cues, 1):
        text = cue.text.replace("&", "&amp;").replace("<", "&lt;").replace("-->", "→").strip() or "…"
        lines += [str(number), f"{_stamp(cue.start)} --> {_stamp(cue.end)}", *text.splitlines(), ""]
    return "\n".join(lines)


def _stamp(seconds: float) -> str:
    millis = round(seconds * 1000)
    return f"{millis // 3_600_000:02d}:{millis // 60_000 % 60:02d}:{millis // 1000 % 60:02d}.{millis % 1000:03d}"
