"""``python -m trainer.tfjob``: the Kubeflow TFJob it prints, loaded back as YAML; and the Dockerfile's
inputs (no Docker engine runs here, so: everything it copies exists and is not excluded)."""
from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from trainer import tfjob
from trainer.train import parse_args

TRAIN = ["--data", "gs://bucket/ds", "--model", "mlp", "--label", "label", "--per-replica-batch", "64", "--epochs", "2",
         "--model-dir", "gs://bucket/runs/r1", "--stage-dir", "/stage"]


def tfjob_cli(*args: str) -> subprocess.CompletedProcess:
    # TensorFlow is made unimportable: generating a job must work on a laptop with only kubectl.
    code = "import sys; sys.modules['tensorflow'] = None; from trainer.tfjob import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_gpu_job_yaml_has_workers_restart_policy_gpus_nccl_env_and_the_trainer_command():
    proc = tfjob_cli("--name", "mlp-r1", "--image", "us-docker.pkg.dev/p/r/trainer:1", "--workers", "4",
                     "--gpus-per-worker", "2", "--namespace", "ml", "--", *TRAIN)
    assert proc.returncode == 0, proc.stderr
    job = yaml.safe_load(proc.stdout)
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert job["metadata"]["name"] == "mlp-r1" and job["metadata"]["namespace"] == "ml"
    specs = job["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Worker"]  # worker 0 is the chief; no Chief or PS replicas
    worker = specs["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "OnFailure"
    pod = worker["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "tensorflow"  # the operator's container name
    assert container["image"] == "us-docker.pkg.dev/p/r/trainer:1"
    assert container["command"] == ["python", "-m", "trainer.train"] and container["args"] == TRAIN
    assert parse_args(container["args"]).model_dir == "gs://bucket/runs/r1"  # the trainer accepts them
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_DEBUG"] == "WARN" and env["PYTHONUNBUFFERED"] == "1"
    assert "TF_CONFIG" not in env  # the operator sets it per pod
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"  # NCCL's shared memory
    assert volumes[mounts["/stage"]]["emptyDir"] == {}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert job["spec"]["runPolicy"]["backoffLimit"] == 3


def test_cpu_job_with_nfs_volume_resources_and_extra_env():
    train = [a.replace("gs://bucket", "/mnt/shared") for a in TRAIN[:-2]]
    job = tfjob.build_tfjob(name="cpu-1", image="img:1", workers=2, train_args=train, cpu="4", memory="16Gi",
                            env={"NCCL_DEBUG": "INFO", "GRPC_VERBOSITY": "ERROR"}, pvcs=[("nfs-data", "/mnt/shared")])
    pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {"cpu": "4", "memory": "16Gi"}, "requests": {"cpu": "4", "memory": "16Gi"}}
    assert "tolerations" not in pod and "namespace" not in job["metadata"]
    assert {"name": "shared-0", "persistentVolumeClaim": {"claimName": "nfs-data"}} in pod["volumes"]
    assert {"name": "shared-0", "mountPath": "/mnt/shared"} in container["volumeMounts"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["GRPC_VERBOSITY"] == "ERROR"
    assert yaml.safe_load(tfjob.render(job)) == job


@pytest.mark.parametrize(
    "args, message",
    [
        (["--name", "Bad_Name", "--image", "i", "--workers", "2", "--", *TRAIN], "--name 'Bad_Name'"),
        (["--name", "a", "--image", "i", "--workers", "0", "--", *TRAIN], "--workers 0: expected at least 1"),
        (["--name", "a", "--image", "i", "--workers", "2"], "give the trainer.train arguments after --"),
        (["--name", "a", "--image", "i", "--workers", "2", "--", *[x.replace("gs://bucket/ds", "./ds") for x in TRAIN]],
         "--data ./ds: not on storage every worker pod can reach"),
        (["--name", "a", "--image", "i", "--workers", "2", "--pvc", "claim", "--", *TRAIN], "--pvc 'claim'"),
        (["--name", "a", "--image", "i", "--workers", "2", "--", *TRAIN, "--no-such-flag"], "are not valid"),
    ],
)
def test_refusals_are_one_line(args, message):
    proc = tfjob_cli(*args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""


# --- the Dockerfile -------------------------------------------------------------------------------


def _dockerfile() -> list[list[str]]:
    text = (ROOT / "Dockerfile").read_text()
    lines = re.sub(r"\\\n", " ", text).splitlines()
    return [shlex.split(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _ignored(rel: str) -> bool:
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")]
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(rel.split("/")[0], p) for p in patterns)


def test_everything_the_dockerfile_copies_exists_and_is_sent_to_the_build():
    copies = [words[1:-1] for words in _dockerfile() if words[0] == "COPY"]
    sources = [src.rstrip("/") for srcs in copies for src in srcs]
    assert sources == ["setup.py", "shardprep", "pipelines", "trainer"]
    for src in sources:
        assert (ROOT / src).exists(), src
        assert not _ignored(src), f"{src} is excluded by .dockerignore"
        if (ROOT / src).is_dir():
            assert (ROOT / src / "__init__.py").exists()
    for excluded in (".venv", ".git", "tests", "demo"):
        assert _ignored(excluded), excluded


def test_dockerfile_installs_extras_that_exist_and_runs_modules_that_exist():
    text = (ROOT / "Dockerfile").read_text()
    extras = re.findall(r'pip install "\.\[([a-z,]+)\]"', text)
    assert extras == ["train,gcp"]
    setup = (ROOT / "setup.py").read_text()
    for extra in extras[0].split(","):
        assert re.search(rf'"{extra}":', setup), extra
    assert re.search(r'"tensorflow==2\.21\.\*"', setup) and "tensorflow[${TF_EXTRA}]==2.21.*" in text
    (cmd,) = [json.loads(line[len("CMD"):]) for line in text.splitlines() if line.startswith("CMD ")]
    assert cmd[:2] == ["python", "-m"] and (ROOT / (cmd[2].replace(".", "/") + ".py")).exists()
    job = tfjob.build_tfjob(name="x", image="i", workers=1, train_args=TRAIN)
    module = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"][2]
    assert (ROOT / (module.replace(".", "/") + ".py")).exists()
