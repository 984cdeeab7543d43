"""The narrated lesson video (pipeline/video.py): its length is the narrations' sum, each block's picture shows
during its narration, and the captions hold each block's text at its narration's times."""

from __future__ import annotations

import io
import math
import struct
import wave

import av
import pytest
from PIL import Image

from pipeline.video import Scene, render, webvtt
from testkit.videocheck import frame_at

COLORS = [(220, 30, 30), (30, 200, 30), (30, 30, 220)]
SECONDS = [1.3, 2.1, 0.7]


def wav(seconds: float, rate: int = 24_000, freq: int = 440) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * freq * i / rate)))
                                 for i in range(int(seconds * rate))))
    return buf.getvalue()


def opus(seconds: float) -> bytes:
    """The same tone in Ogg Opus at 48 kHz stereo: a narration need not be WAV."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="ogg") as out, av.open(io.BytesIO(wav(seconds, 48_000))) as source:
        stream = out.add_stream("libopus", rate=48_000, layout="stereo")
        resampler = av.AudioResampler(format="flt", layout="stereo", rate=48_000)
        for frame in source.decode(audio=0):
            for piece in resampler.resample(frame):
                piece.pts = None
                for packet in stream.encode(piece):
                    out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def picture(color: tuple[int, int, int], size: tuple[int, int] = (1024, 1024)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "WEBP")
    return buf.getvalue()


def test_a_video_lasts_as_long_as_its_narrations_and_shows_each_blocks_picture_during_its_narration(tmp_path):
    scenes = [Scene(picture(COLORS[0]), wav(SECONDS[0]), "The river"),
              Scene(picture(COLORS[1], (1536, 1024)), opus(SECONDS[1]), "carries <stones> & sand -->"),
              Scene(picture(COLORS[2]), wav(SECONDS[2], 16_000), "to the sea.")]
    out = tmp_path / "lesson.mp4"
    made = render(scenes, out, width=640, height=360, fps=10)
    assert made.duration == pytest.approx(sum(SECONDS), abs=0.03)
    with av.open(str(out)) as container:
        assert container.duration / 1e6 == pytest.approx(sum(SECONDS), abs=0.1)
        assert (container.streams.video[0].codec_context.name, container.streams.audio[0].codec_context.name) == \
            ("h264", "aac")
        assert container.streams.audio[0].duration * container.streams.audio[0].time_base == pytest.approx(
            sum(SECONDS), abs=0.05)
    for cue, color in zip(made.cues, COLORS):
        middle = frame_at(out.read_bytes(), (cue.start + cue.end) / 2)
        assert all(abs(a - b) < 12 for a, b in zip(middle.getpixel((320, 180)), color)), (cue, color)
    assert [(round(c.start, 2), round(c.end, 2)) for c in made.cues] == [(0, 1.3), (1.3, 3.4), (3.4, 4.1)]
    captions = webvtt(made.cues)
    assert captions.startswith("WEBVTT\n\n1\n00:00:00.000 --> 00:00:01.300\nThe river\n")
    assert "00:00:01.300 --> 00:00:03.400\ncarries &lt;stones> &amp; sand →" in captions


def test_a_narration_that_is_not_audio_is_refused(tmp_path):
    with pytest.raises((av.error.InvalidDataError, ValueError)):
        render([Scene(picture(COLORS[0]), b"not audio", "x")], tmp_path / "x.mp4")
    with pytest.raises(ValueError, match="at least one scene"):
        render([], tmp_path / "y.mp4")
