"""What people call a run and write about it: `RunLabels`, the body of PATCH /api/runs/{id}."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:+/-]{0,63}$"
MAX_TAGS = 16
MAX_NOTE_CHARS = 20_000
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # note keeps tabs and newlines
# Bidirectional controls (U+202E and kin) make a name display as something else (text reversed, a file
# extension moved): no name needs them.
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
NAME_PATTERN = f"^[^\\x00-\\x1f\\x7f-\\x9f{BIDI}]*$"
_NAME_REFUSED = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{BIDI}]")


class RunLabels(BaseModel):
    """A run's name, tags and markdown note; only the fields sent change (null clears name or note)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        None,
        max_length=200,
        description="A short name, one line without control or bidirectional-control characters; null "
        "clears it.",
        json_schema_extra={"pattern": NAME_PATTERN},
    )
    tags: list[str] | None = Field(
        None,
        max_length=MAX_TAGS,
        description="The run's whole set of tags (letters, digits and _.:+/-, up to 64 characters each).",
    )
    note: str | None = Field(None, max_length=MAX_NOTE_CHARS, description="Markdown; null clears it.")

    @field_validator("name")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if _NAME_REFUSED.search(value):
            raise ValueError(
                "a name is one line without control characters or bidirectional controls (U+202E and kin)"
            )
        return value or None

    @field_validator("tags")
    @classmethod
    def _tags(cls, values: list[str] | None) -> list[str] | None:
        if values is None:
            return None
        bad = [t for t in values if not re.fullmatch(TAG_PATTERN, t)]
        if bad:
            raise ValueError(
                f"tag(s) {', '.join(repr(t[:70]) for t in bad)} are not allowed: a tag starts with a letter "
                "or digit and has up to 64 letters, digits or _.:+/-"
            )
        return sorted(set(values))

    @field_validator("note")
    @classmethod
    def _note(cls, value: str | None) -> str | None:
        if value is not None and _CONTROL.search(value):
            raise ValueError("a note may not contain control characters (tabs and newlines are fine)")
        return value
