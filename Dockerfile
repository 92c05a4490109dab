# The training image: trainer.train and the TF-free shardprep library it reads manifests with.
#   docker build -t REGISTRY/shardprep-trainer:TAG .                      (GPU: TensorFlow with CUDA wheels)
#   docker build --build-arg TF_EXTRA= -t REGISTRY/shardprep-trainer:TAG .  (CPU only)
# The NVIDIA driver comes from the node (device plugin); CUDA and cuDNN from the tensorflow[and-cuda] wheels.
ARG PYTHON=3.11
FROM python:${PYTHON}-slim

ARG TF_EXTRA=and-cuda
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY setup.py ./
COPY shardprep/ shardprep/
COPY pipelines/ pipelines/
COPY trainer/ trainer/
RUN pip install ".[train,gcp]" \
 && if [ -n "$TF_EXTRA" ]; then pip install "tensorflow[${TF_EXTRA}]==2.21.*"; fi \
 && python -c "import shardprep, trainer.train, trainer.launch"

RUN useradd --create-home --uid 1000 trainer && mkdir /stage && chown trainer /stage
USER trainer

# The TFJob (python -m trainer.tfjob) gives the command and arguments; this default shows the flags.
CMD ["python", "-m", "trainer.train", "--help"]
