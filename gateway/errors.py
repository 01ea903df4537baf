"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("gateway.errors")
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


class OpenAIError(Exception):
    def __init__(
        self,
        message: str,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.type, self.param, self.code = (
            message, status, type, param, code,
        )
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status,
                            headers=headers or self.headers)


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(message, 400, "invalid_request_error", param, code)


def model_not_found(model: str) -> OpenAIError:
    return OpenAIError(f"The model `{model}` does not exist.", 404, "invalid_request_error",
                       "model", "model_not_found")


def worker_call_error(exc: RuntimeError) -> OpenAIError:
    """A call into the engine's workers that failed: 409 for a conflict the error names
    (``status_code``), else 503 (a worker did not answer in time; its state is unknown)."""
    status = getattr(exc, "status_code", 503)
    return OpenAIError(str(exc), status,
                       "conflict_error" if status == 409 else "service_unavailable")


def _param(loc: tuple) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OpenAIError)
    async def _openai(_: Request, exc: OpenAIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        from gateway.context import count_rejected

        # Rejected before routing, so the model is not trusted as a label value.
        count_rejected(ENDPOINTS.get(request.url.path, "other"), "400")
        errs = exc.errors()
        first = errs[0] if errs else {}
        if first.get("type") == "missing" and tuple(first.get("loc", ())) == ("body",):
            return invalid("Request body is empty; expected a JSON object.",
                           code="invalid_json").response()
        if first.get("type") == "json_invalid":
            return invalid("Invalid JSON in request body: "
                           + str(first.get("ctx", {}).get("error", first.get("msg"))),
                           code="invalid_json").response()
        param = _param(tuple(first.get("loc", ())))
        msg = first.get("msg", "invalid request")
        if param:
            msg = f"{param}: {msg}"
        if len(errs) > 1:
            msg += f" (and {len(errs) - 1} more error(s))"
        return invalid(msg, param=param).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return OpenAIError(str(exc.detail), exc.status_code, kind).response(
            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return OpenAIError(f"Internal server error: {type(exc).__name__}", 500,
                           "internal_server_error").response()
