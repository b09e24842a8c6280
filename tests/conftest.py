"""Fixtures shared across the test tree, and the order its files are handed out in."""

import pytest

# The files that take longest (the durations table of a fresh-clone run, 2026-12-08: 60–190 s each),
# collected first. pytest-xdist (--dist loadfile, scripts/test) hands whole files to its workers in
# collection order, so a long file collected last left one worker running it alone at the end.
LONGEST_FIRST = (
    "tests/workers/engine/test_reproduce.py",
    "tests/frontend/test_browser_views.py",
    "tests/kernels/test_aot.py",
    "tests/backend/hardening/test_silent_db.py",
    "tests/kernels/test_interpreter_suite.py",
    "tests/kernels/test_interpreter_suite_seq.py",
    "tests/backend/hardening/test_openapi.py",
    "tests/backend/hardening/test_fuzz.py",
)


def pytest_collection_modifyitems(config, items):
    """The longest files first, in LONGEST_FIRST's order; every other file after them, as collected."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def place(item) -> int:
        try:
            path = item.path.relative_to(config.rootpath).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(path, len(rank))

    items.sort(key=place)  # stable: within a file and among the rest, the collection order stands


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """Point the settings an edge reads from the environment (the CLI, `Settings()`) at a private,
    empty data dir.

    No MNIST files are there, so `mnist` is unavailable; kernels use the torch path.
    """
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NORMLAB_KERNEL_BACKEND", "torch")
    yield tmp_path
