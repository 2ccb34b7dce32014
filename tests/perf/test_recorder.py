"""The recorder of a load-generator process: windows collected by end time."""

from __future__ import annotations

import numpy as np

from modelhost.perf.recorder import Recorder


def test_recorder_collects_by_end_time() -> None:
    r = Recorder()
    for start, end in [(0, 5), (1, 10), (2, 15), (3, 25)]:
        r.starts.append(start)
        r.ends.append(end)
    r.send_ns = 7
    reply = r.collect(8, 20)
    assert np.frombuffer(reply[2], dtype=np.int64).tolist() == [10, 15]
    assert reply[3] == 7 and reply[5] == 2
    assert list(r.ends) == [25] and r.send_ns == 0
