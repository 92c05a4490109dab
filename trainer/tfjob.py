"""``python -m trainer.tfjob --name N --image IMG --workers W -- <trainer.train args>``: a Kubeflow TFJob.

Prints a ``kubeflow.org/v1`` ``TFJob`` for ``kubectl apply -f -``: W ``Worker`` replicas (worker 0
is the chief: the trainer's rule when no chief task exists), ``restartPolicy: OnFailure`` (a
restarted worker resumes from the latest checkpoint), GPUs as ``nvidia.com/gpu`` limits, a
memory-backed ``/dev/shm`` and NCCL settings for pod networking, and the ``trainer.train`` command.
The training operator sets ``TF_CONFIG`` in every pod. TF-free: runs on any machine with kubectl.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any

from shardprep import cli
from trainer.refusals import TrainerError

__all__ = ["DEFAULT_ENV", "build_tfjob", "main", "render"]

PROG = "trainer.tfjob"
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")  # pods are named <name>-worker-<i>
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=.*$", re.DOTALL)
DEFAULT_ENV = {
    "PYTHONUNBUFFERED": "1",
    "TF_CPP_MIN_LOG_LEVEL": "1",
    "NCCL_DEBUG": "WARN",  # INFO prints the rings and transports chosen, to debug a slow all-reduce
    "NCCL_SOCKET_IFNAME": "eth0",  # the pod network; NCCL could otherwise pick lo or a docker bridge
}
_CONTAINER = "tensorflow"  # the training operator looks for this container name


class TFJobError(TrainerError):
    """A setting that would make a TFJob Kubernetes refuses or one that cannot train."""


def _check_train_args(train_args: Sequence[str], mounts: Sequence[str]) -> Any:
    """The trainer's own flag checks, plus: every pod must reach --data and --model-dir."""
    from trainer.train import parse_args

    try:
        cfg = parse_args(list(train_args))
    except SystemExit as e:  # argparse has printed the reason
        raise TFJobError("the trainer.train arguments after -- are not valid (see above)") from e
    for flag, value in (("--data", cfg.data), ("--model-dir", cfg.model_dir)):
        shared = "://" in value or any(value == m or value.startswith(m.rstrip("/") + "/") for m in mounts)
        if not shared:
            raise TFJobError(
                f"{flag} {value}: not on storage every worker pod can reach; use gs://BUCKET/PATH, or mount a "
                f"shared volume with --pvc CLAIM:/MOUNT and put it below /MOUNT"
            )
    if cfg.stage_dir and not cfg.stage_dir.startswith("/"):
        raise TFJobError(f"--stage-dir {cfg.stage_dir}: an absolute folder on the pod's own disk, e.g. /stage")
    return cfg


def build_tfjob(
    *,
    name: str,
    image: str,
    workers: int,
    train_args: Sequence[str],
    gpus_per_worker: int = 0,
    namespace: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    env: dict[str, str] | None = None,
    pvcs: Sequence[tuple[str, str]] = (),
    shm_size: str = "8Gi",
    backoff_limit: int = 3,
    service_account: str | None = None,
) -> dict[str, Any]:
    """The TFJob as a dict (what ``render`` prints)."""
    if not _NAME_RE.match(name):
        raise TFJobError(f"--name {name!r}: use 1-40 lower-case letters, digits and '-', starting with a letter")
    if workers < 1:
        raise TFJobError(f"--workers {workers}: expected at least 1")
    if gpus_per_worker < 0:
        raise TFJobError(f"--gpus-per-worker {gpus_per_worker}: expected 0 or more")
    if not train_args:
        raise TFJobError("give the trainer.train arguments after --, e.g. -- --data gs://b/ds --model mlp ...")
    cfg = _check_train_args(train_args, [path for _, path in pvcs])

    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if gpus_per_worker:
        limits["nvidia.com/gpu"] = gpus_per_worker
    for key, value in (("cpu", cpu), ("memory", memory)):
        if value:
            requests[key] = limits[key] = value
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}

    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}}]
    for i, (claim, path) in enumerate(pvcs):
        mounts.append({"name": f"shared-{i}", "mountPath": path})
        volumes.append({"name": f"shared-{i}", "persistentVolumeClaim": {"claimName": claim}})
    if cfg.stage_dir:  # staged shards go to node-local scratch, not the container's writable layer
        mounts.append({"name": "stage", "mountPath": cfg.stage_dir})
        volumes.append({"name": "stage", "emptyDir": {}})

    container: dict[str, Any] = {
        "name": _CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "trainer.train"],
        "args": list(train_args),
        "env": [{"name": k, "value": v} for k, v in {**DEFAULT_ENV, **(env or {})}.items()],
        "volumeMounts": mounts,
    }
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if service_account:
        pod["serviceAccountName"] = service_account
    if gpus_per_worker:
        pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "shardprep-trainer",
                                                          "app.kubernetes.io/instance": name}}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": metadata,
        "spec": {
            "runPolicy": {"backoffLimit": backoff_limit, "cleanPodPolicy": "None"},  # keep pods for logs
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {"labels": dict(metadata["labels"]),
                                     "annotations": {"sidecar.istio.io/inject": "false"}},
                        "spec": pod,
                    },
                }
            },
        },
    }


def render(job: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(job, sort_keys=False, default_flow_style=False)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Print a Kubeflow TFJob (kubeflow.org/v1) that runs trainer.train on W worker pods.",
        epilog="example: python -m trainer.tfjob --name mlp-1 --image us-docker.pkg.dev/P/R/trainer:1 --workers 4 "
        "--gpus-per-worker 1 -- --data gs://B/ds --model mlp --label label --per-replica-batch 256 --epochs 3 "
        "--model-dir gs://B/runs/mlp-1 --stage-dir /stage | kubectl apply -f -",
    )
    p.add_argument("--name", required=True, help="TFJob name (pods are <name>-worker-<i>)")
    p.add_argument("--image", required=True, help="training image (see the Dockerfile)")
    p.add_argument("--workers", type=int, required=True, help="worker pods; worker 0 is the chief")
    p.add_argument("--gpus-per-worker", type=int, default=0, help="nvidia.com/gpu per pod (default: 0)")
    p.add_argument("--namespace", help="Kubernetes namespace (default: kubectl's)")
    p.add_argument("--cpu", help="CPU request and limit per pod, e.g. 8")
    p.add_argument("--memory", help="memory request and limit per pod, e.g. 32Gi")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment; repeatable")
    p.add_argument("--pvc", action="append", default=[], metavar="CLAIM:/MOUNT",
                   help="mount a PersistentVolumeClaim (e.g. NFS, ReadWriteMany) in every pod; repeatable")
    p.add_argument("--shm-size", default="8Gi", help="memory-backed /dev/shm for NCCL (default: %(default)s)")
    p.add_argument("--backoff-limit", type=int, default=3, help="job restarts before it fails (default: %(default)s)")
    p.add_argument("--service-account", help="pod service account (e.g. bound to a GCS-reading identity)")
    return p


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, train_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = _parser().parse_args(own)
    env = {}
    for item in args.env:
        if not _ENV_RE.match(item):
            raise TFJobError(f"--env {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        env[key] = value
    pvcs = []
    for item in args.pvc:
        claim, sep, path = item.partition(":")
        if not (sep and claim and path.startswith("/")):
            raise TFJobError(f"--pvc {item!r}: expected CLAIM:/MOUNT/PATH")
        pvcs.append((claim, path))
    job = build_tfjob(
        name=args.name, image=args.image, workers=args.workers, train_args=train_args,
        gpus_per_worker=args.gpus_per_worker, namespace=args.namespace, cpu=args.cpu, memory=args.memory,
        env=env, pvcs=pvcs, shm_size=args.shm_size, backoff_limit=args.backoff_limit,
        service_account=args.service_account,
    )
    sys.stdout.write(render(job))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
