"""``graph.tasks``: a stage's work in this process or as a worker's task gives its outputs in element
order, side outputs tagged, what it counted and (in a task) its log records; the work stays set up
between a stage's tasks and is torn down when another stage's task comes."""
from __future__ import annotations

import logging
import pickle

from shardprep.graph import tasks
from shardprep.graph.counting import Counter
from shardprep.graph.elements import Tagged


class Halves:
    """Halves even numbers, tags odd ones, counts them; a flush and a record of its set-up and tear-down."""

    events: list[str] = []

    def __init__(self) -> None:
        self._seen = Counter("numbers_seen")

    def setup(self) -> None:
        Halves.events.append("setup")

    def process(self, n: int, bonus: list) -> object:
        self._seen.inc()
        logging.getLogger("shardprep").info("saw %d", n)
        yield Tagged("odd", n) if n % 2 else n // 2 + sum(bonus)

    def flush(self) -> object:
        yield "flushed"

    def teardown(self) -> None:
        Halves.events.append("teardown")


def test_in_line_outputs_in_order_tagged_and_counted():
    Halves.events = []
    outputs, counted = tasks.run_inline(Halves(), [4, 3, 8], ([100],))
    assert outputs == [(None, 102), ("odd", 3), (None, 104), (None, "flushed")]
    assert counted == {"numbers_seen": 3}
    assert Halves.events == ["setup", "teardown"]


def test_a_task_keeps_its_work_set_up_and_sends_its_log_records_back():
    Halves.events = []
    blob = pickle.dumps(Halves())
    logger = logging.getLogger("shardprep")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    try:
        tasks.collect_logs(logging.INFO)
        first = tasks.run_task((b"key", blob, [2], ([0],)))
        second = tasks.run_task((b"key", blob, [5], ([0],)))
        tasks.run_task((b"other", pickle.dumps(Halves()), [], ()))  # another stage: the first torn down
    finally:
        logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate
    assert first[:2] == ([(None, 1), (None, "flushed")], {"numbers_seen": 1})
    assert second[:2] == ([("odd", 5), (None, "flushed")], {"numbers_seen": 1})
    assert [r.getMessage() for r in first[2]] == ["saw 2"] and [r.getMessage() for r in second[2]] == ["saw 5"]
    assert Halves.events == ["setup", "teardown", "setup"]


def test_split_output():
    assert tasks.split_output(Tagged("facts", 1)) == ("facts", 1)
    assert tasks.split_output((1, 2)) == (None, (1, 2))
