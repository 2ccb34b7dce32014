"""Model environments: what many loading threads do at once to the shared cache."""

from __future__ import annotations

import threading
from pathlib import Path

import modelhost
from modelhost.backends.python import environments
from modelhost.backends.python.environments import EnvironmentSettings


def test_loading_threads_make_the_stub_links_at_once_without_a_fault(tmp_path: Path) -> None:
    """The links every environment's stub needs are made by whichever model comes first; many models of a
    server load at once, each on its own thread (a race here once failed models' loads with FileNotFoundError)."""
    settings = EnvironmentSettings(tmp_path / "cache")
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def make() -> None:
        start.wait()
        try:
            for _ in range(20):
                environments._stub_path(settings)
        except BaseException as e:  # collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=make) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    link = tmp_path / "cache" / "stub-path" / "modelhost"
    assert link.resolve() == Path(modelhost.__file__).parent.resolve()
