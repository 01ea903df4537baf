"""A remote backend's error answer, in the error shape specgw itself answers with.

Behind the router, one request may be served by ``specgw serve`` or by a stock ``vllm
serve``, and a client must not see two error vocabularies for the same mistake. vLLM
0.32's server answers a too-long prompt with ``{"error": {"type": "BadRequestError",
"code": 400, ...}}`` (its exception class and the HTTP status), vLLM 0.26 with the same
fields at the top level (``"object": "error"``), and anything in between (a proxy, a
crashed handler) may answer with plain text. OpenAI's shape, which specgw serve gives:
``{"error": {"message", "type", "param", "code"}}`` with a snake_case ``type`` and a
string or null ``code``. The message and param are kept as the backend wrote them.
"""

from __future__ import annotations

import json

MAX_PARSED = 64 * 1024  # an error body larger than this is not read as JSON
MAX_MESSAGE = 2000  # characters of a backend's message passed on

# The ``type`` OpenAI (and specgw) gives each 4xx status; any other 4xx is a bad request.
TYPE_BY_STATUS = {401: "authentication_error", 403: "permission_error",
                  404: "not_found_error", 429: "rate_limit_error"}
KNOWN_TYPES = {"invalid_request_error", *TYPE_BY_STATUS.values(), "service_unavailable",
               "backend_error", "internal_server_error", "server_error", "api_error"}


def openai_error_body(status: int, raw: bytes, backend: str) -> bytes:
    """``raw`` (the backend's body for ``status`` >= 400) as an OpenAI error body."""
    err = _backend_error(raw)
    if err is None:
        text = raw.decode("utf-8", "replace").strip()[:200]
        err = {"message": f"backend {backend} answered HTTP {status}: {text or '(empty)'}"}
    kind = err.get("type")
    if not isinstance(kind, str) or kind not in KNOWN_TYPES:
        kind = TYPE_BY_STATUS.get(status, "invalid_request_error")
    code, param = err.get("code"), err.get("param")
    return json.dumps({"error": {
        "message": str(err.get("message") or f"HTTP {status}")[:MAX_MESSAGE],
        "type": kind,
        "param": param if isinstance(param, str) else None,
        "code": code if isinstance(code, str) else None,  # vLLM puts the status here
    }}).encode()


def _backend_error(raw: bytes) -> dict | None:
    if len(raw) > MAX_PARSED:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("error"), dict):
        return obj["error"]
    if obj.get("object") == "error" or "message" in obj:  # vLLM 0.26: the fields on top
        return obj
    return None
