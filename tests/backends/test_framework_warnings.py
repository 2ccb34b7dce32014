"""Backends silence or log framework warnings at load without leaving the process's warning state changed, even
when loads on two threads overlap."""

from __future__ import annotations

import logging
import threading
import warnings

import pytest

from modelhost.backends import framework_warnings


def test_overlapping_blocks_on_two_threads_leave_the_warning_state_as_it_was(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = list(warnings.filters)
    show_before = warnings.showwarning
    inside = threading.Event()
    release = threading.Event()
    log = logging.getLogger("test.framework")

    def first() -> None:
        with framework_warnings.logged(log, lambda m: f"first: {m}"):
            inside.set()
            release.wait(5)
            warnings.warn("from the first load", UserWarning, stacklevel=1)

    def second() -> None:
        inside.wait(5)
        with framework_warnings.ignored(DeprecationWarning):
            warnings.warn("a deprecation", DeprecationWarning, stacklevel=1)

    with caplog.at_level(logging.WARNING, logger="test.framework"):
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for t in threads:
            t.start()
        inside.wait(5)
        release.set()
        for t in threads:
            t.join(5)
    assert "first: from the first load" in caplog.text
    assert warnings.filters == before
    assert warnings.showwarning is show_before
    # Later warnings are emitted as usual again (pytest turns them into errors here), not recorded away.
    with pytest.raises(UserWarning, match="after both"):
        warnings.warn("after both", UserWarning, stacklevel=1)
