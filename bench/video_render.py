#!/usr/bin/env python3
"""The narrated lesson video's render time beside the video's length, on one core.

A lesson of `--blocks` blocks (10 by default), each narrated by the local speech provider (espeak-ng) from about
six seconds of text and illustrated by the local image provider (1024x1024 cards), is rendered by
pipeline/video.py (H.264 at `--size` and `--fps`, AAC) `--runs` times, pinned to one core. Printed: the narration's
length, the render's CPU and wall seconds per run, their medians, and the median wall time as a fraction of real
time (the goal: at most 0.1). The speech and the pictures are made once, before the timing.

    .venv/bin/python bench/video_render.py [--blocks 10] [--runs 5] [--size 1280x720] [--fps 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.video import Scene, render  # noqa: E402
from providers.base import GenerateRequest  # noqa: E402
from providers.local_image import LocalImageProvider  # noqa: E402
from providers.local_tts import LocalSpeechProvider  # noqa: E402

SENTENCE = ("Block {n}: the river carries small stones down from the hills, and over many years they become "
            "the sand of the beach where children play in summer.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--fps", type=int, default=12)
    args = parser.parse_args()
    width, height = (int(x) for x in args.size.split("x"))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    with tempfile.TemporaryDirectory() as tmp:
        speech = LocalSpeechProvider(Path(tmp) / "tts")
        cards = LocalImageProvider(Path(tmp) / "image")
        scenes = []
        for n in range(1, args.blocks + 1):
            text = SENTENCE.format(n=n)
            audio = speech.generate(GenerateRequest("audio", text, {"locale": "en"}, f"bench-a{n}")).data
            image = cards.generate(GenerateRequest("image", text, {}, f"bench-i{n}")).data
            scenes.append(Scene(image, audio, text))
        walls, cpus, length = [], [], 0.0
        for run in range(args.runs):
            cpu, wall = time.process_time(), time.perf_counter()
            length = render(scenes, Path(tmp) / "lesson.mp4", width=width, height=height, fps=args.fps).duration
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - wall)
            print(f"run {run + 1}: {walls[-1]:.2f} s wall, {cpus[-1]:.2f} s CPU")
        size = (Path(tmp) / "lesson.mp4").stat().st_size
    median = statistics.median(walls)
    print(f"{args.blocks} blocks, {length:.1f} s of narration, {width}x{height} at {args.fps} fps, one core; "
          f"video {size / 1e6:.2f} MB")
    print(f"render median {median:.2f} s wall, {statistics.median(cpus):.2f} s CPU: {median / length:.3f} x real time "
          f"(goal <= 0.1)")
    return 0 if median / length <= 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
