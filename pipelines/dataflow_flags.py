"""Dataflow batch jobs: the Google Cloud flags a re-shard needs, checked before anything is built.

Workers install this package from ``--setup_file`` (default: the ``setup.py`` next to this
package, when there is one) without TensorFlow. Classic templates (``--template_location``) are
refused: the launcher globs the input, infers the schema, plans the work units and picks the run
folder when the job is built, so a classic template would replay one frozen input list and one run
id forever; use a Flex Template, whose launcher runs the command at every launch
(docs/scale-out.md).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)

from shardprep import fs
from shardprep.errors import UsageError

__all__ = ["DEFAULT_SETUP_FILE", "check_locations", "dataflow_args"]

DEFAULT_SETUP_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")


def _gcs_path_problem(options: PipelineOptions, flag: str) -> str | None:
    """Beam's own check of a gs:// location flag, as one line; None when it is sound or unset."""
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

    value = getattr(options.view_as(GoogleCloudOptions), flag)
    if not value:
        return None
    errors = PipelineOptionsValidator(options, None).validate_gcs_path(options.view_as(GoogleCloudOptions), flag)
    if errors:
        return f"--{flag} {value}: {errors[0].splitlines()[0]} (e.g. gs://my-bucket/tmp)"
    return None


def dataflow_args(beam_args: Sequence[str], *, setup_file: str | None = DEFAULT_SETUP_FILE) -> list[str]:
    """Checks Beam's flags for a Dataflow batch job and completes them; returns the flags to use.

    Raises UsageError naming the flag: missing --project/--region/--temp_location, a temp or
    staging location that is not a valid gs:// path (Beam would otherwise try to create a default
    bucket), streaming, or a classic template.
    """
    args = list(beam_args)
    options = PipelineOptions(args)
    gcp = options.view_as(GoogleCloudOptions)
    missing = [f"--{name}" for name in ("project", "region") if not getattr(gcp, name)]
    if not (gcp.temp_location or gcp.staging_location):
        missing.append("--temp_location")
    if missing:
        raise UsageError(
            f"--runner dataflow needs {', '.join(missing)}: e.g. --project my-project --region us-central1 "
            f"--temp_location gs://my-bucket/tmp"
        )
    for flag in ("temp_location", "staging_location"):
        problem = _gcs_path_problem(options, flag)
        if problem:
            raise UsageError(problem)
    if gcp.template_location:
        raise UsageError(
            f"--template_location {gcp.template_location}: a classic template would freeze this run's input list, "
            f"schema and run folder; run the job directly, or launch this command from a Flex Template "
            f"(see docs/scale-out.md)"
        )
    if options.view_as(StandardOptions).streaming:
        raise UsageError("--streaming: the re-shard is a batch job; drop --streaming")
    setup = options.view_as(SetupOptions)
    custom_image = options.view_as(WorkerOptions).sdk_container_image
    if not (setup.setup_file or setup.extra_packages or custom_image):
        if not (setup_file and os.path.exists(setup_file)):
            raise UsageError(
                "Dataflow workers need this package: pass --setup_file PATH/TO/shardprep/setup.py, or "
                "--sdk_container_image with the package installed"
            )
        args.append(f"--setup_file={setup_file}")
    return args


def check_locations(output: str, inputs: Sequence[str]) -> None:
    """Dataflow workers run in Google Cloud: refuses input or output on this machine's disk."""
    if fs.is_local(output):
        raise UsageError(f"--output {output} is on this machine's disk, which Dataflow workers cannot reach; "
                         f"write to gs://BUCKET/PATH")
    local = [url for url in inputs if fs.is_local(url)]
    if local:
        raise UsageError(f"--input {local[0]} is on this machine's disk, which Dataflow workers cannot reach; "
                         f"copy the input to gs:// first (gcloud storage cp)")
