"""`normlab up / api / frontend` listen on --port, else NORMLAB_PORT, else the command's own default."""

from __future__ import annotations

import argparse
import socket

import pytest

from normlab.cli import CLIError, main, serve
from normlab.settings import Settings


def _args(command: str, argv: list[str]):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    serve.register(sub)
    return p.parse_args([command, *argv])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fresh_settings(monkeypatch):
    monkeypatch.delenv("NORMLAB_PORT", raising=False)
    yield monkeypatch


@pytest.mark.parametrize("command, default", [("up", 8050), ("frontend", 8050), ("api", 8000)])
def test_port_comes_from_flag_then_environment_then_default(fresh_settings, command, default):
    env_port, flag_port = _free_port(), _free_port()
    args = _args(command, [])
    assert serve._listen(args, Settings())[1] == default
    fresh_settings.setenv("NORMLAB_PORT", str(env_port))
    assert serve._listen(args, Settings()) == ("127.0.0.1", env_port)
    args = _args(command, ["--port", str(flag_port)])
    assert serve._listen(args, Settings())[1] == flag_port


def test_a_taken_port_is_a_cli_message(fresh_settings):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(CLIError, match=f"127.0.0.1:{port}.*pass another --port"):
            serve._listen(_args("up", ["--port", str(port)]), Settings())


def test_bad_normlab_port_is_refused(fresh_settings):
    fresh_settings.setenv("NORMLAB_PORT", "99999")
    with pytest.raises(ValueError, match="port"):
        Settings()


def test_a_port_out_of_range_is_a_cli_message(fresh_settings):
    with pytest.raises(CLIError, match="between 1 and 65535, got 99999"):
        serve._listen(_args("up", ["--port", "99999"]), Settings())


def test_bad_normlab_variables_are_named_in_one_message_not_a_traceback(fresh_settings, capsys):
    fresh_settings.setenv("NORMLAB_PORT", "abc")
    fresh_settings.setenv("NORMLAB_AUTH", "maybe")

    def never(*a):  # the settings are read first: nothing may start listening
        raise AssertionError("normlab up went on to listen")

    fresh_settings.setattr(serve, "_listen", never)
    assert main(["up"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("normlab up: bad setting: ") and "Traceback" not in err
    assert "NORMLAB_PORT=abc" in err and "NORMLAB_AUTH=maybe: Input should be 'off' or 'tokens'" in err
