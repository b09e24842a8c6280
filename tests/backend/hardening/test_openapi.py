"""The OpenAPI document describes the answers: schemathesis (its CLI, every check, every phase —
examples, coverage, fuzzing, stateful) against a real `normlab api` in the embedded form (SQLite, file
queue) and with PostgreSQL finds 0 failures. Examples per operation are bounded to keep CI's time."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from benchmarks.service import service_env, start_api, stop_process

pytestmark = pytest.mark.slow
CONFIG = Path(__file__).with_name("schemathesis.toml")
PG_BASE = "postgresql://127.0.0.1:5432/test"
MAX_EXAMPLES = 3


@pytest.mark.parametrize("form", ["embedded", "postgresql"])
def test_schemathesis_all_checks_all_phases_finds_nothing(tmp_path, form):
    schema = None
    extra: dict = {"submit_rate_per_minute": 100_000}  # the fuzzer submits far more than a person
    if form == "postgresql":
        schema = f"nloa_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        extra["database_url"] = f"postgresql+psycopg://127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    env = service_env(tmp_path, queue=f"nloa-{uuid.uuid4().hex[:6]}", **extra)
    url, api = start_api(tmp_path, env)
    try:
        # One finished run, so operations on a run id have a real one to find (links/stateful too).
        run_id = httpx.post(url + "api/runs", json={"task": "digits", "steps": 5}).json()["id"]
        httpx.post(url + f"api/runs/{run_id}/cancel")
        proc = subprocess.run(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "--config-file",
                str(CONFIG),
                "run",
                url + "api/openapi.json",
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing,stateful",
                "--max-examples",
                str(MAX_EXAMPLES),
                "--generation-deterministic",
                "--request-timeout",
                "5",
                "--continue-on-failure",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
        )
        summary = proc.stdout[proc.stdout.find("SUMMARY") :] if "SUMMARY" in proc.stdout else proc.stdout
        assert proc.returncode == 0, proc.stdout[-12000:] + proc.stderr[-2000:]
        assert " 0 unique failures" not in summary and "generated" in summary, summary
    finally:
        stop_process(api, signal.SIGTERM)
        if schema:
            with psycopg.connect(PG_BASE, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
