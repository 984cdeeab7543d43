"""Media providers: image and text-to-speech adapters behind one interface.

`base` defines the interface (requests, results, lookup answers, the
`Provider` protocol) and `errors` the four ways a call can fail (Permanent,
Transient, Ambiguous, Busy); `registry.build_provider` picks an adapter from a
`ProviderConfig`. Adapters: `local_image` (Pillow, offline), `local_tts`
(eSpeak NG, optional and GPL, imported only when used) and `openai_http`
(OpenAI-compatible HTTP). Providers import nothing of ours (no `pipeline`,
`web` or `bin`) and know nothing of tasks or databases.
"""

from .base import KINDS, Found, GenerateRequest, LookupAnswer, NoRecord, Provider, Result, Unsupported

__all__ = ["KINDS", "Found", "GenerateRequest", "LookupAnswer", "NoRecord", "Provider", "Result", "Unsupported"]
