"""`NormlabError`: the one exception the client raises for a server's refusal or an unreachable server."""

from __future__ import annotations


class NormlabError(Exception):
    """The server's message (`message`), the field it names (`field`, or None), every field's message
    (`fields`) and the HTTP status (`status`; None when the server could not be reached)."""

    def __init__(self, message: str, status: int | None = None, fields: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.fields = dict(fields or {})
        self.field: str | None = next(iter(self.fields), None)

    def __str__(self) -> str:
        return self.message if self.status is None else f"{self.message} (HTTP {self.status})"


def from_response(status: int, body: object, fallback: str) -> NormlabError:
    """The API's error body `{"detail": message, "fields": {field: message}}` as a NormlabError."""
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        fields = body.get("fields") if isinstance(body.get("fields"), dict) else {}
        return NormlabError(body["detail"], status, {str(k): str(v) for k, v in (fields or {}).items()})
    return NormlabError(fallback or f"The server answered HTTP {status}.", status)
