"""Child process: what TensorFlow sees (version, build's CUDA/cuDNN, GPUs and their details) as JSON.

Run apart from the check itself, so the parent never imports TensorFlow (it would fix the thread
pools and the GPU memory of the process that spawns every measured run).
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "probe"]


def probe() -> dict[str, Any]:
    import tensorflow as tf

    build = {k: str(v) for k, v in tf.sysconfig.get_build_info().items()}
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        cc = details.get("compute_capability")
        gpus.append({"device": device.name, "name": details.get("device_name"),
                     "compute_capability": ".".join(map(str, cc)) if cc else None})
    return {
        "tensorflow": tf.__version__,
        "cuda_build": tf.test.is_built_with_cuda(),
        "build_cuda_version": build.get("cuda_version"),
        "build_cudnn_version": build.get("cudnn_version"),
        "build_info": build,
        "tf_gpus": gpus,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check.env_probe")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    doc = probe()
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
