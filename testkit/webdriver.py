"""A minimal W3C WebDriver client for Debian's chromium-driver, over `requests`.

Enough to sign in, fill forms, click, wait on the page and take screenshots; no
Selenium dependency. `Chromium.start()` raises `Unavailable` where the browser or
its driver is missing or cannot start, so tests can skip instead of failing.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
from pathlib import Path

import requests

from bin.embedded import free_port

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class Unavailable(RuntimeError):
    """No usable headless Chromium here."""


class Chromium:
    def __init__(self, driver: subprocess.Popen, base: str, session: str) -> None:
        self.driver, self.base, self.session = driver, base, session

    @classmethod
    def start(cls, width: int = 1280, height: int = 1400) -> "Chromium":
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        driver_path = shutil.which("chromedriver")
        if not browser or not driver_path:
            raise Unavailable("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
        port = free_port()
        driver = subprocess.Popen([driver_path, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            cls._wait_ready(base)
            options = {"binary": browser, "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                                   "--disable-dev-shm-usage", f"--window-size={width},{height}",
                                                   "--autoplay-policy=no-user-gesture-required"]}
            answer = requests.post(f"{base}/session", json={"capabilities": {"alwaysMatch": {
                "browserName": "chrome", "goog:chromeOptions": options}}}, timeout=60).json()
            session = answer["value"].get("sessionId")
            if not session:
                raise Unavailable(f"chromium did not start: {answer['value'].get('message', answer)}"[:300])
        except (requests.RequestException, KeyError, Unavailable) as exc:
            driver.terminate()
            driver.wait(10)
            raise Unavailable(str(exc)) from exc
        return cls(driver, base, session)

    @staticmethod
    def _wait_ready(base: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/status", timeout=2).json()["value"]["ready"]:
                    return
            except (requests.RequestException, ValueError, KeyError):
                pass
            time.sleep(0.1)
        raise Unavailable("chromedriver did not become ready")

    def _call(self, method: str, path: str, body: dict | None = None):
        url = f"{self.base}/session/{self.session}{path}"
        answer = requests.request(method, url, json=body if body is not None else ({} if method == "POST" else None),
                                  timeout=60).json()
        value = answer.get("value")
        if isinstance(value, dict) and "error" in value:
            raise AssertionError(f"webdriver {path}: {value['error']}: {value.get('message', '')[:300]}")
        return value

    def open(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    def find(self, css: str) -> str:
        return self._call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def click(self, css: str, *, timeout: float = 10.0) -> None:
        """Click the element `css` finds. The board and the task page replace their live part every 2 s, so an
        element found just before a refresh may be gone when the click arrives: it is found again, until `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._call("POST", f"/element/{self.find(css)}/click")
                return
            except AssertionError as exc:
                if "stale element reference" not in str(exc) or time.monotonic() > deadline:
                    raise

    def type(self, css: str, text: str) -> None:
        element = self.find(css)
        self._call("POST", f"/element/{element}/clear")
        self._call("POST", f"/element/{element}/value", {"text": text})

    def script(self, source: str, *args):
        return self._call("POST", "/execute/sync", {"script": source, "args": list(args)})

    def current_path(self) -> str:
        return self.script("return location.pathname")

    def wait_for(self, source: str, *, timeout: float = 60, message: str = "condition") -> object:
        """Poll a JavaScript expression (`return ...`) until it is truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.script(source)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{message} did not hold within {timeout} s")
            time.sleep(0.2)

    def sign_in(self, server: str, key: str) -> None:
        """Sign in with an API key on the sign-in page, as a person does."""
        self.open(f"{server}/signin")
        self.type('input[name="api_key"]', key)
        self.click('form button[type="submit"]')
        self.wait_for("return location.pathname === '/'", timeout=10, message="signed in")

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._call("GET", "/screenshot")))

    def quit(self) -> None:
        try:
            self._call("DELETE", "")
        finally:
            self.driver.terminate()
            try:
                self.driver.wait(10)
            except subprocess.TimeoutExpired:
                self.driver.kill()
