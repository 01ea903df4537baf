"""Request bodies must be JSON text that decodes to valid Unicode (RFC 8259).

Python's ``json`` accepts more than JSON: ``NaN``/``Infinity`` literals, and ``\\ud800``
escapes (or raw surrogate bytes, which it decodes with ``surrogatepass``) that produce
strings no UTF-8 encoder can write back. Such a string, echoed in an error message or
handed to the tokenizer, used to raise ``UnicodeEncodeError`` deep inside the response
path: a 500 and a dropped keep-alive connection. Rejecting it where the body is parsed
closes the whole class at once: every string the gateway ever sees is encodable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _check_strings(obj: Any, doc: str) -> None:
    """Raise ``JSONDecodeError`` on the first string (key or value) holding a surrogate."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            texts: list = [o]
        elif isinstance(o, dict):
            texts = list(o)
            stack.extend(o.values())
            # fallthrough to the key check below
        elif isinstance(o, list):
            stack.extend(o)
            continue
        else:
            continue
        for t in texts:
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise json.JSONDecodeError(
                    f"invalid Unicode in string: lone surrogate U+{ord(t[exc.start]):04X}",
                    doc, 0) from None


def loads_strict(body: bytes) -> Any:
    """``json.loads`` for request bodies: UTF-8 only, no NaN/Infinity, no lone surrogates."""
    try:
        doc = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"body is not valid UTF-8 ({exc.reason})", "", exc.start
                                   ) from None
    try:
        obj = json.loads(doc, parse_constant=_no_constants)
    except ValueError as exc:  # NaN/Infinity, or an integer over Python's digit limit
        if isinstance(exc, json.JSONDecodeError):
            raise
        raise json.JSONDecodeError(str(exc), doc, 0) from None
    except RecursionError:
        raise json.JSONDecodeError("nesting too deep", doc, 0) from None
    if "\\u" in doc:  # only escapes can smuggle a surrogate in valid UTF-8
        _check_strings(obj, doc)
    return obj


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """FastAPI route whose body parser is :func:`loads_strict` (errors become 400s)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
