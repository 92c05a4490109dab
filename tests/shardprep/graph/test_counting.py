"""``graph.counting``: a stage's counters go to the sink of this process, whatever the engine."""
from __future__ import annotations

from shardprep.graph.counting import Counter, Discard, Tally, counting_into, install


class Listed:
    """A sink of an engine of our own: every ``inc`` as it came."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def inc(self, name: str, n: int) -> None:
        self.seen.append((name, n))


def test_counters_go_to_the_sink_of_the_block_and_the_one_before_comes_back():
    records, bytes_read = Counter("records"), Counter("bytes")
    outer = Listed()
    with counting_into(outer):
        records.inc()
        with counting_into(Tally()) as tally:
            records.inc(2)
            bytes_read.inc(10)
            records.inc(3)
        records.inc(4)
    assert dict(tally) == {"records": 5, "bytes": 10}
    assert outer.seen == [("records", 1), ("records", 4)]


def test_without_an_engine_counts_are_dropped():
    previous = install(Discard())
    try:
        Counter("records").inc(7)  # nowhere to go, and no error
        sink = Listed()
        assert isinstance(install(sink), Discard)
        Counter("records").inc(7)
        assert sink.seen == [("records", 7)]
    finally:
        install(previous)
