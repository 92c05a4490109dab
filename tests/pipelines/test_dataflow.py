"""``--runner dataflow``: the job graph built with Beam's ``--dry_run=True`` (nothing submitted, no
network beyond loopback), our steps under stable labels, the flag checks, and the sdist that
``--setup_file ./setup.py`` stages installing without TensorFlow. The Dataflow service itself is the
one thing not exercised."""
from __future__ import annotations

import contextlib
import email
import ipaddress
import logging
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.portability.api import beam_runner_api_pb2

from pipelines import beam_graph, dataflow, engines
from shardprep import config, formats, naming, planning, submit
from shardprep.cli import UsageError
from tests.conftest import ROOT, sample_rows, write_csv
from tests.gcs_emulator import gcs, gcs_emulator  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

CLOUD = ["--project=shardprep-test", "--region=us-central1", "--temp_location=gs://shardprep-test-bucket/tmp"]
# Beam runs `pip freeze` (6 s here) to stage a list of the launcher's packages; tests skip that.
DRY = ["--dry_run=True", "--experiments=disable_logging_submission_environment"]
LABELS = {"Units", "Distribute", "CountRanges", "Parse", "Count", "Assign", "GroupByShard", "WriteShards", "KeyRejected",
          "GroupRejected", "WriteRejected", "AllFacts", "KeyFacts", "Gather", "Commit"}

_guard = {"on": False, "blocked": []}


def _loopback_only(event: str, args: tuple) -> None:
    if not _guard["on"]:
        return
    host = None
    if event == "socket.connect" and isinstance(args[1], tuple):
        host = args[1][0]
    elif event == "socket.getaddrinfo":
        host = args[0]
    if host is None or host in ("localhost", "") or (isinstance(host, bytes) and host == b"localhost"):
        return
    try:
        if ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host).is_loopback:
            return
    except ValueError:
        pass
    _guard["blocked"].append((event, host))
    raise ConnectionRefusedError(f"test guard: {event} to {host} refused (loopback only)")


sys.addaudithook(_loopback_only)


@contextlib.contextmanager
def loopback_only():
    """Any connection or name lookup beyond loopback raises, and is recorded."""
    _guard.update(on=True, blocked=[])
    try:
        yield _guard["blocked"]
    finally:
        _guard["on"] = False


@pytest.fixture
def job_input(gcs, tmp_path):  # noqa: F811 - the fixture imported above
    path = write_csv(tmp_path / "a.csv", sample_rows(300))
    url = gcs.upload(path, "raw/a.csv")
    files = formats.expand_inputs([url], "auto")
    units = formats.plan_units(files, unit_bytes=10_000)
    cfg = config.ReshardConfig(
        output=gcs.url("ds"), run_id=naming.new_run_id(), features={"id": {"dtype": "int64", "shape": []}},
        sources=tuple((f.url, f.size) for f in files), splits=planning.parse_splits("train=0.9,eval=0.1"),
        num_shards=4,
    )
    return cfg, units


def _dependencies(job) -> dict[str, str]:
    """Staged name -> local file of every artifact the job would upload."""
    out = {}
    for env in job.proto_pipeline.components.environments.values():
        for dep in env.dependencies:
            path = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path
            staged = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload).staged_name
            out[staged] = path
    return out


def test_dry_run_builds_the_job_graph_with_our_labels_and_submits_nothing(job_input):
    cfg, units = job_input
    args = [*CLOUD, *DRY, "--job_name=shardprep-dry-run"]
    with loopback_only() as blocked:
        assert submit.run(cfg, units, engines.RunOptions("dataflow", beam_args=tuple(args))) is False
        pipeline = beam.Pipeline(options=engines.engine("dataflow").options(args))
        beam_graph.build(pipeline, cfg, len(units))
        result = pipeline.run()
    assert blocked == []
    job = result.job
    names = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    assert {f"Reshard/{label}" for label in LABELS} <= names
    assert job.proto.name == "shardprep-dry-run" and job.proto.type.name == "JOB_TYPE_BATCH"
    assert job.options.view_as(beam.options.pipeline_options.SetupOptions).setup_file == str(ROOT / "setup.py")
    sdist = _dependencies(job)["workflow.tar.gz"]  # what Dataflow workers pip-install
    assert Path(sdist).name == "shardprep-0.1.0.tar.gz" and Path(sdist).exists()


def test_staged_sdist_installs_and_imports_without_tensorflow(job_input, tmp_path):
    cfg, units = job_input
    pipeline = beam.Pipeline(options=engines.engine("dataflow").options([*CLOUD, *DRY]))
    beam_graph.build(pipeline, cfg, len(units))
    sdist = Path(_dependencies(pipeline.run().job)["workflow.tar.gz"])
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    assert {"shardprep/job.py", "pipelines/beam_graph.py", "pipelines/dask_engine.py", "setup.py"} <= members

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                    "--target", str(target), str(sdist)], check=True, capture_output=True, timeout=300)
    (meta,) = target.glob("shardprep-*.dist-info/METADATA")
    requires = email.message_from_string(meta.read_text()).get_all("Requires-Dist")
    tf = [r for r in requires if r.lower().startswith("tensorflow")]
    assert tf and all("; extra ==" in r for r in tf), requires  # only in extras (train, all)
    # Import the installed copy, with TensorFlow made unimportable, from outside the repository.
    code = (
        "import sys; sys.modules['tensorflow'] = None; sys.path.insert(0, sys.argv[1]);"
        "import shardprep, shardprep.graph, shardprep.verify, pipelines.beam_graph, pipelines.dataflow, "
        "pipelines.dask_engine; assert shardprep.__file__.startswith(sys.argv[1]), shardprep.__file__;"
        "assert 'tensorflow' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code, str(target)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--project=p-1"], "--runner dataflow needs --region, --temp_location"),
        (["--project=p-1", "--region=r", "--temp_location=gs://b/tmp"], "--temp_location gs://b/tmp: Invalid GCS bucket"),
        (["--project=p-1", "--region=r", "--temp_location=/tmp/x"], "--temp_location /tmp/x: Invalid GCS path"),
        ([*CLOUD, "--template_location=gs://shardprep-test-bucket/t"], "a classic template would freeze"),
        ([*CLOUD, "--streaming"], "the re-shard is a batch job"),
    ],
)
def test_dataflow_flags_are_refused_in_one_line(args, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        dataflow.dataflow_args(args)


def test_cli_refuses_local_paths_before_building_a_job(tmp_path, capsys):
    path = write_csv(tmp_path / "raw" / "a.csv", sample_rows(20))
    with loopback_only() as blocked:
        rc = dataflow.main(["--input", str(path), "--output", str(tmp_path / "ds"), "--num-shards", "2", *CLOUD, *DRY])
    err = capsys.readouterr().err
    assert rc == 2 and "is on this machine's disk, which Dataflow workers cannot reach" in err, err
    assert "Traceback" not in err and blocked == []
    assert dataflow.main(["--runner", "direct"]) == 2


def test_setup_file_defaults_to_this_checkout_and_respects_the_users_choice():
    assert dataflow.dataflow_args(CLOUD)[-1] == f"--setup_file={ROOT / 'setup.py'}"
    assert dataflow.dataflow_args([*CLOUD, "--setup_file=./other.py"]) == [*CLOUD, "--setup_file=./other.py"]
    image = "--sdk_container_image=us-docker.pkg.dev/p/r/shardprep:1"
    assert dataflow.dataflow_args([*CLOUD, image]) == [*CLOUD, image]
    with pytest.raises(UsageError, match="Dataflow workers need this package: pass --setup_file"):
        dataflow.dataflow_args(CLOUD, setup_file="/installed/from/a/wheel/setup.py")


def test_the_loopback_guard_refuses_other_hosts():
    with loopback_only() as blocked, pytest.raises(ConnectionRefusedError):
        socket.getaddrinfo("storage.googleapis.com", 443)
    assert blocked == [("socket.getaddrinfo", "storage.googleapis.com")]


@pytest.mark.parametrize("runner, beam_runner, flag", [
    ("flink", "FlinkRunner", "--flink_master=flink-jm:8081"),
    ("spark", "SparkRunner", "--spark_master_url=spark://spark-master:7077"),
    ("portable", "PortableRunner", "--job_endpoint=localhost:8099"),
])
def test_portable_runner_names_map_to_beam_runners(runner, beam_runner, flag):
    from apache_beam.options.pipeline_options import PortableOptions, StandardOptions

    chosen = engines.engine(runner)
    options = chosen.options([flag, "--environment_type=LOOPBACK"])
    assert options.view_as(StandardOptions).runner == beam_runner
    assert options.view_as(PortableOptions).environment_type == "LOOPBACK"
    assert runner in engines.RUNNERS and not chosen.on_this_machine(engines.RunOptions(runner))


class _ServiceJob:
    """The Dataflow service's side of a job (it cannot run here): waiting is interrupted by Ctrl-C."""

    def __init__(self, cancel_fails: bool = False) -> None:
        self.cancelled, self._fails = False, cancel_fails

    def job_id(self) -> str:
        return "2026-12-03_01_02_03-123"

    def wait_until_finish(self) -> None:
        raise KeyboardInterrupt

    def cancel(self) -> None:
        if self._fails:
            raise RuntimeError("403 permission denied")
        self.cancelled = True


@pytest.mark.parametrize("cancel_fails", [False, True])
def test_an_interrupted_launch_cancels_the_service_job(cancel_fails):
    """Ctrl-C while the launcher waits: the job is cancelled (or the user told to cancel it), and the
    interrupt goes on to the clean-up (``shardprep.interrupts``)."""
    job = _ServiceJob(cancel_fails)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # the CLI's logging set-up, if a test made it, stops propagation
    logging.getLogger("shardprep").addHandler(handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            beam_graph._wait(job, cancel=True)
    finally:
        logging.getLogger("shardprep").removeHandler(handler)
    assert job.cancelled is not cancel_fails
    said = " ".join(r.getMessage() for r in records)
    assert ("could not cancel job 2026-12-03_01_02_03-123" if cancel_fails else "cancelled job 2026-12-03_01_02_03-123") in said
