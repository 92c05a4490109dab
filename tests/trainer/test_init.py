"""The package's front door (``trainer/__init__.py``): the public names, TensorFlow-free, every module named."""
from __future__ import annotations

import pkgutil
import subprocess
import sys

import trainer

ENTRY_POINTS = ("train", "launch", "evaluate", "tfjob", "image_rate", "demo", "demo_images", "demo_text")


def test_importing_the_public_names_does_not_import_tensorflow_or_the_entry_points():
    code = (
        "import sys\n"
        "import trainer\n"  # python -m trainer.launch imports the package first: it must not import the entry points
        f"entry = [m for m in {ENTRY_POINTS!r} if 'trainer.' + m in sys.modules]\n"
        "assert not entry, f'entry points imported: {entry}'\n"
        "from trainer import *\n"
        "assert Controller.__name__ == 'Controller' and open_input.__name__ == 'open'\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'tensorflow imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_public_name_resolves_and_every_error_is_a_trainer_error():
    for name in trainer.__all__:
        assert getattr(trainer, name) is not None, name
    errors = [getattr(trainer, n) for n in trainer.__all__ if n.endswith("Error")]
    assert len(errors) >= 8 and all(issubclass(e, trainer.TrainerError) for e in errors)


def test_the_docstring_names_every_module_and_every_entry_point_runs_as_a_module():
    modules = {m.name for m in pkgutil.iter_modules(trainer.__path__)}
    missing = sorted(m for m in modules if f"``{m}``" not in trainer.__doc__ and f"``trainer.{m}``" not in trainer.__doc__)
    assert not missing, f"modules the package docstring does not name: {missing}"
    for name in ENTRY_POINTS:
        assert f"``trainer.{name}``" in trainer.__doc__, name
        assert pkgutil.get_loader(f"trainer.{name}") is not None
