"""`video`: the version's narrated lesson, an MP4 (H.264 and AAC) showing each block's image for as long as its
narration, with the blocks' texts as a WebVTT caption track (pipeline/video.py). Local work, after every image and
narration of the version; its input is what it shows (the media's fingerprints and the texts), so the same images,
audio and text make the same video, reused without rendering. VIDEO_ENABLED=false plans none. Pure."""

from __future__ import annotations

from pipeline.core.kinds import Kind


def plan(setup, draft, block, planned) -> dict:
    return {"kind": "video", "width": setup["width"], "height": setup["height"], "fps": setup["fps"],
            "blocks": [{"key": b.key, "text": b.text, "image": planned[f"image:{b.key}"].fingerprint,
                        "audio": planned[f"tts:{b.key}"].fingerprint} for b in draft.blocks]}


def _size(value: str) -> int:
    number = int(value) if value.strip().isdigit() else 0
    if not 16 <= number <= 3840 or number % 2:
        raise ValueError("an even number of pixels from 16 to 3840")
    return number


def _fps(value: str) -> int:
    number = int(value) if value.strip().isdigit() else 0
    if not 1 <= number <= 60:
        raise ValueError("a whole number of frames per second from 1 to 60")
    return number


KIND = Kind("video", "video", per_block=False, word="lesson video", plan=plan, needs=("image", "tts"), work="pipeline.video:make",
            workers=1, interactive_workers=0,
            options={"width": (_size, 1280), "height": (_size, 720), "fps": (_fps, 12)})
