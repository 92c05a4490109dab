"""Beam's ``--direct_*`` flags read as the local pool's size (``shardprep.run_checks.direct_flags``)."""
import pytest

from shardprep import capacity, run_checks
from shardprep.errors import UsageError


@pytest.mark.parametrize("args, local_workers, expected", [
    (["--direct_running_mode=multi_processing", "--direct_num_workers=3", "--x=1"], None, (3, ["--x=1"])),
    (["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"], None, (2, [])),
    (["--direct_num_workers=2"], 2, (2, [])),                     # both flags, one count
    (["--direct_running_mode=multi_processing"], None, (None, [])),  # no count: the default, one per core
    (["--direct_num_workers=0"], None, (capacity.machine_cores(), [])),  # Beam's 0: one per core
    (["--project=p"], 4, (4, ["--project=p"])),
])
def test_beams_direct_flags_size_the_pool_and_never_reach_beam(args, local_workers, expected):
    assert run_checks.direct_flags(args, local_workers) == expected


@pytest.mark.parametrize("args, local_workers, message", [
    (["--direct_num_workers=2"], 3, "--local-workers 3 and --direct_num_workers=2 ask for different"),
    (["--direct_num_workers=two"], None, "--direct_num_workers 'two': expected a count"),
    (["--direct_running_mode=many"], None, "--direct_running_mode 'many': expected one of in_memory"),
])
def test_beams_direct_flags_refused(args, local_workers, message):
    with pytest.raises(UsageError, match=message):
        run_checks.direct_flags(args, local_workers)
