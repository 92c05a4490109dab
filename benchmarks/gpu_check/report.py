"""The one table the check prints: a row per part, its status and its figures in a line."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["render"]

_WIDTH = 150  # a failed part's error is cut here in the table; the JSON keeps it whole


def _n(value: Any, digits: int = 0) -> str:
    if value is None:
        return "?"
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else str(value)


def _environment(p: dict[str, Any]) -> str:
    gpus = p.get("tf_gpus") or []
    smi = (p.get("smi_gpus") or [{}])[0]
    gpu = (f"{gpus[0]['name']} (cc {gpus[0]['compute_capability']}) x{len(gpus)}" if gpus
           else f"no GPU in TF (nvidia-smi: {smi.get('name', p.get('nvidia_smi'))})")
    return (f"{gpu}; driver {smi.get('driver', '?')}, driver CUDA {p.get('driver_cuda_version') or '?'}; TF "
            f"{p.get('tensorflow')} built for CUDA {p.get('build_cuda_version') or '-'} / cuDNN "
            f"{p.get('build_cudnn_version') or '-'}; {p.get('cpus_usable')} of {p.get('cpu_count')} cores; "
            f"/dev/shm {_n(p.get('dev_shm_gib'), 1)} GiB")


def _dataset(p: dict[str, Any]) -> str:
    return (f"{_n(p.get('rows'))} rows ({_n(p.get('csv_mb'), 1)} MB CSV) -> {p.get('shards')} shards of "
            f"{p.get('records_min')}-{p.get('records_max')} records, re-shard {_n(p.get('reshard_s'), 1)} s")


def _cold(p: dict[str, Any]) -> str:
    nccl = f"NCCL {p['nccl_version']}, {p['nccl_info_lines']} INFO lines" if p.get("nccl_info_lines") else "no NCCL lines"
    return (f"spawn -> first log {_n(p.get('first_log_s'), 1)} s -> strategy ready {_n(p.get('strategy_ready_s'), 1)} s "
            f"({p.get('all_reduce')}) -> step 1 done {_n(p.get('first_step_done_s'), 1)} s (the step itself "
            f"{_n(p.get('first_step_s'), 2)} s); {nccl}")


def _train(p: dict[str, Any]) -> str:
    return (f"{p.get('steps')} steps, {_n(p.get('steps_per_second'), 1)} steps/s, "
            f"{_n(p.get('examples_per_second'))} ex/s, input wait {_n(p.get('input_wait_fraction'), 3)} "
            f"(floor {_n(p.get('input_wait_floor_fraction'), 3)}), loss {_n(p.get('first_loss'), 3)} -> "
            f"{_n(p.get('final_loss'), 3)}, {p.get('precision')}, {p.get('all_reduce')}")


def _inputs(p: dict[str, Any]) -> str:
    cells = [f"{r['cores']} cores {_n(r['in_turn']['examples_per_second'])} / "
             f"{_n(r['parallel_read']['examples_per_second'])}" for r in p.get("by_cores", [])]
    return "ex/s in turn / parallel read: " + "; ".join(cells)


def _cores(p: dict[str, Any]) -> str:
    def cell(v: dict[str, Any]) -> str:
        k = v.get("cores_enough")
        enough = f"{k} core{'s' if k > 1 else ''} enough" if k else "all measured cores fall short"
        return f"{enough} (linear estimate {_n(v.get('cores_linear_estimate'), 1)})"

    return (f"{p.get('fastest_run')} wants {_n(p.get('gpu_wants_examples_per_second'))} ex/s: in turn "
            f"{cell(p['in_turn'])}; parallel read {cell(p['parallel_read'])}")


_FORMATS: dict[str, Callable[[dict[str, Any]], str]] = {
    "environment": _environment, "dataset": _dataset, "cold_start": _cold, "input_pipeline": _inputs,
    "image_model": lambda p: str(p.get("status")), "cores_per_gpu": _cores,
}


_BOOKKEEPING = {"ok", "error", "seconds", "traceback", "skipped"}


def _figures(name: str, part: dict[str, Any]) -> str:
    if not set(part) - _BOOKKEEPING:  # failed before it measured anything
        return ""
    fmt = _train if name.startswith("train_") else _FORMATS.get(name, lambda p: "")
    try:
        return fmt(part)
    except (KeyError, TypeError, IndexError):  # a part that failed early has few figures
        return ""


def render(doc: dict[str, Any]) -> str:
    """The table of ``doc`` (what ``gpu_check.json`` holds), with a title line."""
    parts: dict[str, dict[str, Any]] = doc["parts"]
    width = max([len(n) for n in parts] + [4])
    lines = [f"GPU check ({doc['mode']} mode), {doc['started']}, {doc.get('wall_s', '?')} s",
             f"{'part':<{width}}  {'status':<7}  {'s':>6}  result", "-" * (width + 100)]
    for name, part in parts.items():
        status = "skipped" if part.get("skipped") else ("ok" if part["ok"] else "FAIL")
        text = _figures(name, part)
        if not part["ok"]:
            error = part.get("error", "")
            text = f"{error[:_WIDTH]}{'...' if len(error) > _WIDTH else ''}" + (f" | {text}" if text else "")
        lines.append(f"{name:<{width}}  {status:<7}  {part.get('seconds', 0):>6.1f}  {text}")
    return "\n".join(lines)
