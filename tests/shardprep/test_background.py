"""``shardprep.background.Behind``: calls run one at a time on a thread of their own, in the order
given, one behind the caller; an error surfaces at the next ``submit`` or ``wait``; ``inline`` runs
each call in ``submit`` with the same effects; the thread starts at the first call and ends at ``close``."""
from __future__ import annotations

import threading
import time

import pytest

from shardprep.background import Behind


def test_calls_take_effect_in_order_one_behind_the_caller():
    done: list[int] = []
    threads: set[str] = set()

    def slow(i: int) -> None:
        time.sleep(0.01 if i % 2 else 0)
        threads.add(threading.current_thread().name)
        done.append(i)

    behind = Behind("test-behind")
    for i in range(10):
        behind.submit(slow, i)
        assert done == list(range(i))  # the call before has ended; this one may still run
    behind.wait()
    assert done == list(range(10))
    assert len(threads) == 1 and threads.pop().startswith("test-behind")
    behind.close()


def test_an_error_surfaces_at_the_next_wait_and_close_still_ends_the_thread():
    def fail() -> None:
        raise ValueError("the shard could not be stored")

    behind = Behind("test-behind")
    behind.submit(fail)
    with pytest.raises(ValueError, match="could not be stored"):
        behind.wait()
    behind.wait()  # raised once: nothing pending now
    behind.submit(fail)
    with pytest.raises(ValueError):
        behind.submit(print)  # the next submit waits for the call before
    behind.submit(fail)
    with pytest.raises(ValueError):
        behind.close()
    assert behind._thread is None


def test_inline_runs_each_call_in_submit():
    seen: list[str] = []
    behind = Behind("unused", inline=True)
    behind.submit(lambda: seen.append(threading.current_thread().name))
    assert seen == [threading.current_thread().name] and behind._thread is None
    with pytest.raises(ZeroDivisionError):
        behind.submit(lambda: 1 / 0)
    behind.close()


def test_no_thread_before_the_first_call():
    behind = Behind("test-behind")
    assert behind._thread is None
    behind.wait()
    behind.close()
    assert behind._thread is None
