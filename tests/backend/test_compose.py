"""docker-compose.yml (Docker cannot run here): it parses, each normlab service's command is a real
CLI command, and the lab-server essentials are there (healthchecks, volume, GPU, CPU profile)."""

from __future__ import annotations

from pathlib import Path

import yaml

from normlab.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def load() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_service_command_exists_in_the_cli():
    services = load()["services"]
    parser = build_parser()
    normlab_services = [s for s in services.values() if s.get("command", [""])[0] == "normlab"]
    assert {s["command"][1] for s in normlab_services} == {"api", "frontend", "worker"}
    for svc in normlab_services:
        args = parser.parse_args(svc["command"][1:])  # exits (SystemExit) on an unknown command/option
        assert callable(args.func)
        assert (ROOT / svc["build"]["dockerfile"]).is_file()


def test_lab_server_essentials():
    doc = load()
    s = doc["services"]
    for name in ("redis", "postgres", "api", "frontend"):
        assert s[name]["healthcheck"]["test"], name
    assert any(v.endswith(":/var/lib/postgresql/data") for v in s["postgres"]["volumes"])
    assert "pg-data" in doc["volumes"]
    assert "${POSTGRES_PASSWORD:?" in (ROOT / "docker-compose.yml").read_text()  # required variable
    [gpu] = s["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert s["worker-cpu"]["profiles"] == ["cpu"] and "deploy" not in s["worker-cpu"]
    for name in ("api", "worker", "worker-cpu"):
        env = s[name]["environment"]
        assert env["NORMLAB_BROKER_URL"].startswith("redis://") and "postgres" in env["NORMLAB_DATABASE_URL"]
    assert s["api"]["depends_on"]["postgres"]["condition"] == "service_healthy"
