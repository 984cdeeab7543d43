"""`bin/import FILE.jsonl`: contents into the bulk lane through the JSON API, one content per line.

Each line is one content (`{"title", "locale", "theme"?, "blocks"}`, as `POST /api/contents`
takes it), saved with `"priority": "bulk"` and an Idempotency-Key made from the batch name (the
file's name unless --batch says otherwise) and the line's content. A second run of the same file
sends every line again with the same key: the API answers what it accepted the first time
(`Idempotent-Replayed`) and saves only the rest, so an import stopped half-way is resumed by
running it again. Two identical lines are one content. A line the API refuses (bad JSON, a
broken rule) is reported with its number and skipped; a save is one transaction, so a refused
line leaves nothing behind. While the API is at capacity (503) or limits the key (429) the
import waits as its Retry-After says and sends the same line again.

Only the standard library: it runs with any Python 3.11, on any machine that reaches the API.
Exit codes: 0 every line accepted (now or by an earlier run), 1 some lines refused,
2 stopped: unreadable file, key refused, API unreachable (run again to resume), 130 interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

REFUSED = "refused"
ACCEPTED = "accepted"
REPLAYED = "accepted before"


class Stop(Exception):
    """The import cannot go on (the key was refused, the API stayed unreachable)."""


@dataclass
class Answer:
    status: int
    body: dict
    headers: dict


def post_json(url: str, body: dict, headers: dict, timeout: float = 60) -> Answer:
    """POST a JSON body; any HTTP status is an Answer, a network failure raises OSError."""
    request = urllib.request.Request(url, data=json.dumps(body, ensure_ascii=False).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json",
                                              **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, _json(response.read()), dict(response.headers.items()))
    except urllib.error.HTTPError as exc:
        with exc:
            return Answer(exc.code, _json(exc.read()), dict(exc.headers.items()))


def _json(raw: bytes) -> dict:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def line_key(batch: str, content: dict) -> str:
    """The Idempotency-Key of one line: the same content in the same batch is the same request."""
    canonical = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return "import-" + hashlib.sha256(f"{batch}\n{canonical}".encode()).hexdigest()[:48]


def parse_line(raw: bytes) -> dict | str | None:
    """The content of one line, None for a blank line, or why the line is unusable."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.start + 1})"
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not valid JSON ({exc})"
    if not isinstance(value, dict):
        return f"expected a JSON object (one content), found {type(value).__name__}"
    return value


def problem(answer: Answer) -> str:
    error = answer.body.get("error") if isinstance(answer.body.get("error"), dict) else {}
    text = f"{answer.status} {error.get('code', 'error')}: {error.get('message', 'no message')}"
    return text + (f" (field {error['field']})" if error.get("field") else "")


@dataclass
class Importer:
    url: str
    api_key: str | None
    batch: str
    post: Callable[[str, dict, dict], Answer] = post_json
    sleep: Callable[[float], None] = time.sleep
    max_wait: float = 900.0          # seconds one line may wait on capacity before the import stops
    tries: int = 6                   # sends of one line while the API is unreachable or failing
    notify: Callable[[str], None] = lambda text: None   # what the current line waits for

    def save(self, content: dict) -> tuple[str, str]:
        """Send one content; (ACCEPTED|REPLAYED, content id) or (REFUSED, why). Raises Stop."""
        body = {**content, "priority": "bulk"}
        headers = {"Idempotency-Key": line_key(self.batch, content)}
        if self.api_key:
            headers["X-API-Key"] = self.api_key
        waited, failures = 0.0, 0
        while True:
            try:
                answer = self.post(f"{self.url}/api/contents", body, headers)
            except OSError as exc:
                failures += 1
                if failures >= self.tries:
                    raise Stop(f"cannot reach {self.url}: {exc}") from None
                self._pause(min(30.0, 2.0 ** failures), f"unreachable, try {failures + 1}/{self.tries}")
                continue
            if answer.status == 202:
                replayed = str(answer.headers.get("Idempotent-Replayed", "")).lower() == "true"
                return (REPLAYED if replayed else ACCEPTED), str(answer.body.get("content_id", "?"))
            if answer.status in (404, 405):
                raise Stop(f"{self.url} has no save API ({answer.status}); check --url")
            if answer.status in (401, 403):
                raise Stop(f"the API refused the key: {problem(answer)}; pass an editor's key with --api-key "
                           "or MEDIAPIPE_API_KEY")
            if answer.status in (429, 503):
                pause = _retry_after(answer.headers, default=5.0)
                waited += pause
                if waited > self.max_wait:
                    raise Stop(f"the API stayed busy for {waited:.0f} s: {problem(answer)}")
                self._pause(pause, "API busy" if answer.status == 503 else "rate limited")
                continue
            if answer.status >= 500:
                failures += 1
                if failures >= self.tries:
                    raise Stop(f"the API keeps failing: {problem(answer)}")
                self._pause(min(30.0, 2.0 ** failures), f"server error, try {failures + 1}/{self.tries}")
                continue
            return REFUSED, problem(answer)

    def _pause(self, seconds: float, why: str) -> None:
        self.notify(f"{why}; sending it again in {seconds:.0f} s")
        self.sleep(seconds)


def _retry_after(headers: dict, default: float) -> float:
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    try:
        return max(0.5, min(600.0, float(value)))
    except (TypeError, ValueError):
        return default


@dataclass
class Progress:
    """A progress bar on a terminal; elsewhere (a log, a pipe) a progress line every 10 %."""

    total: int
    out: TextIO
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    counts: dict = field(default_factory=dict)
    _tenth: int = 0
    _drawn: float = 0.0

    @property
    def tty(self) -> bool:
        return self.out.isatty()

    def message(self, text: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        self.out.write(("\r\x1b[2K" if self.tty else "") + text + "\n")
        self._bar("", force=True)

    def waiting(self, text: str) -> None:
        if self.tty:
            self._bar(text, force=True)
        else:
            self.out.write(f"line {self.done + 1}: {text}\n")
            self.out.flush()

    def step(self, outcome: str) -> None:
        self.done += 1
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if self.tty:
            self._bar("", force=self.done == self.total)
        elif int(10 * self.done / max(self.total, 1)) > self._tenth or self.done == self.total:
            self._tenth = int(10 * self.done / max(self.total, 1))
            self.out.write(self.text() + "\n")
            self.out.flush()

    def text(self, waiting: str = "") -> str:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.done / elapsed
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        seconds_left = (self.total - self.done) / rate if self.done else 0
        left = f", about {seconds_left:.0f} s left" if seconds_left >= 1 else ""
        return (f"{self.done}/{self.total} lines ({counts or 'none yet'}), {rate:.1f} lines/s{left}"
                + (f" [{waiting}]" if waiting else ""))

    def _bar(self, waiting: str, force: bool = False) -> None:
        if not self.tty or (not force and time.monotonic() - self._drawn < 0.1):
            return
        filled = int(30 * self.done / max(self.total, 1))
        self.out.write(f"\r\x1b[2K[{'#' * filled}{'.' * (30 - filled)}] {self.text(waiting)}")
        self.out.flush()
        self._drawn = time.monotonic()

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def run(path: Path, importer: Importer, out: TextIO) -> int:
    try:
        raw_lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        print(f"bin/import: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()           # the newline that ends the last line
    progress = Progress(len(raw_lines), out)
    importer.notify = progress.waiting
    refused: list[int] = []
    seen: dict[str, int] = {}
    stopped = None
    number = 0
    try:
        for number, raw in enumerate(raw_lines, 1):
            content = parse_line(raw)
            if content is None:
                progress.step("blank")
                continue
            if isinstance(content, str):
                refused.append(number)
                progress.message(f"line {number}: {content}; skipped")
                progress.step(REFUSED)
                continue
            key = line_key(importer.batch, content)
            if key in seen:
                progress.message(f"line {number}: the same content as line {seen[key]}; imported once")
                progress.step("duplicate")
                continue
            seen[key] = number
            outcome, detail = importer.save(content)
            if outcome == REFUSED:
                refused.append(number)
                progress.message(f"line {number}: {detail}; skipped")
            progress.step(outcome)
    except Stop as exc:
        stopped = f"stopped at line {number}: {exc}"
    except KeyboardInterrupt:
        stopped = f"interrupted at line {number}"
    progress.finish()
    summary(path, progress, refused, stopped, out)
    if stopped:
        return 130 if stopped.startswith("interrupted") else 2
    return 1 if refused else 0


def summary(path: Path, progress: Progress, refused: list[int], stopped: str | None, out: TextIO) -> None:
    c = progress.counts
    rows = [("lines", progress.total),
            ("accepted now", c.get(ACCEPTED, 0)),
            ("accepted by an earlier run (skipped)", c.get(REPLAYED, 0)),
            ("refused (skipped, nothing written)", c.get(REFUSED, 0)),
            ("duplicates of an earlier line", c.get("duplicate", 0)),
            ("blank", c.get("blank", 0))]
    if stopped:
        rows.append(("not sent", progress.total - progress.done))
    out.write(f"import of {path.name} in the bulk lane ({time.monotonic() - progress.started:.1f} s):\n")
    for label, n in rows:
        out.write(f"  {label:<38} {n}\n")
    if refused:
        shown = ", ".join(map(str, refused[:20])) + (", ..." if len(refused) > 20 else "")
        out.write(f"  refused lines: {shown}\n")
    if stopped:
        out.write(f"{stopped}. Run the same command again to resume: accepted lines are skipped.\n")
    out.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/import", description=(
        "Import contents, one JSON object per line, into the bulk lane (editors' saves go first; contents "
        "take turns). Resumable: running the same file again skips the lines already accepted. Exit codes: "
        "0 all lines accepted, 1 some lines refused (listed), 2 stopped (file, key or API), 130 interrupted."))
    parser.add_argument("file", type=Path, help="a .jsonl file: one content per line")
    parser.add_argument("--url", default=os.environ.get("MEDIAPIPE_URL")
                        or f"http://127.0.0.1:{os.environ.get('PORT') or 8000}",
                        help="the web app (default: $MEDIAPIPE_URL, else http://127.0.0.1:$PORT or :8000)")
    parser.add_argument("--api-key", default=os.environ.get("MEDIAPIPE_API_KEY") or os.environ.get("LAB_API_KEY"),
                        help="an editor's API key (default: $MEDIAPIPE_API_KEY, else $LAB_API_KEY)")
    parser.add_argument("--batch", help="names the import in its Idempotency-Keys (default: the file's name); "
                                        "a new name imports the same lines again as new contents")
    args = parser.parse_args(argv)
    importer = Importer(args.url.rstrip("/"), args.api_key, args.batch or args.file.name)
    return run(args.file, importer, sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
