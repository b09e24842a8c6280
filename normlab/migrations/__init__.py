"""Alembic migrations of the results store (`normlab db upgrade`); see normlab.store.migrate."""
