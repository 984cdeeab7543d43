"""The narrated lesson video of a version: each block's image for as long as its narration, H.264 and AAC in MP4,
and the blocks' texts as a caption track (mov_text, the MP4's own; `webvtt` gives the same cues as a WebVTT file).
Local work (no provider, nothing paid), made with PyAV, whose wheel carries FFmpeg's libraries: no system ffmpeg.

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
from av.subtitles.subtitle import SubtitleSet
from PIL import Image, ImageOps

from pipeline import db
from pipeline.core.errors import PipelineError
from pipeline.core.records import Made, Work

AUDIO_RATE = 48_000
AUDIO_LAYOUT = "mono"
CAPTION_TIME = Fraction(1, 1000)
# The mov_text encoder takes its cues as ASS dialogue lines and needs a script header to open.
_ASS_HEADER = ("[Script Info]\nScriptType: v4.00+\nPlayResX: 384\nPlayResY: 288\n\n[V4+ Styles]\n"
               "Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, "
               "Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, "
               "Alignment, MarginL, MarginR, MarginV, Encoding\nStyle: Default,Sans,16,&Hffffff,&Hffffff,&H0,&H0,0,0,"
               "0,0,100,100,0,0,1,1,0,2,10,10,10,0\n\n[Events]\nFormat: Layer, Start, End, Style, Name, MarginL, "
               "MarginR, MarginV, Effect, Text\n").encode()


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
        captions = container.add_stream("mov_text")
        captions.codec_context.subtitle_header = _ASS_HEADER
        captions.time_base = captions.codec_context.time_base = CAPTION_TIME
        _encode_pictures(container, video, scenes, cues, fps, width, height, total / AUDIO_RATE)
        _encode_narrations(container, audio, narrations)
        _encode_captions(container, captions, cues)
    return Rendered(total / AUDIO_RATE, cues)


def _encode_captions(container, stream, cues: tuple[Cue, ...]) -> None:
    for cue in cues:
        start, end = round(cue.start * 1000), round(cue.end * 1000)
        text = " ".join(cue.text.split()).replace("\\", "\\\\").replace("{", "\\{") or "…"
        packet = stream.codec_context.encode_subtitle(
            SubtitleSet.create(f"0,0,Default,,0,0,0,,{text}".encode(), 0, end - start, pts=start * 1000))
        packet.stream, packet.time_base = stream, CAPTION_TIME
        packet.pts = packet.dts = start
        packet.duration = end - start
        container.mux(packet)


def captions(mp4: Path | bytes) -> tuple[Cue, ...]:
    """The caption track of a video this module made, read back from the file."""
    source = io.BytesIO(mp4) if isinstance(mp4, bytes) else str(mp4)
    cues = []
    with av.open(source) as container:
        stream = container.streams.subtitles[0]
        for packet in container.demux(stream):
            if packet.size > 2 and packet.pts is not None:   # a cue: a 16-bit length, then the UTF-8 text
                start = float(packet.pts * stream.time_base)
                cues.append(Cue(start, start + float(packet.duration * stream.time_base),
                                bytes(packet)[2:].decode("utf-8")))
    return tuple(cues)


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


def make(work: Work, out: Path) -> Made:
    """The video task's local work (pipeline/core/kinds/video.py): its version's images and narrations, block by
    block as its input lists them, rendered at the input's size and frame rate."""
    task = work.task
    media = {(t["kind"], t["block_key"]): t for t in db.all(work.conn, "tasks_media_of_version",
                                                              {"content_id": task.content_id, "version": task.version})}
    scenes = []
    for block in task.input["blocks"]:
        image, audio = media.get(("image", block["key"])), media.get(("tts", block["key"]))
        if image is None or audio is None or image["sha256"] is None or audio["sha256"] is None:
            raise PipelineError(f"block {block['key']}: its image or narration is not ready")
        scenes.append(Scene(read_asset(work.store, image["sha256"]), read_asset(work.store, audio["sha256"]), block["text"]))
    made = render(scenes, out, width=task.input["width"], height=task.input["height"], fps=task.input["fps"])
    return Made("video/mp4", task.input["width"], task.input["height"], round(made.duration * 1000))


def read_asset(store, sha: str) -> bytes:
    """A stored asset's bytes, whole (a picture or a narration: small)."""
    pieces = store.chunks(sha)
    if pieces is None:
        raise FileNotFoundError(f"asset {sha} is not in the media store")
    return b"".join(pieces)
