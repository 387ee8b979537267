#!/bin/sh
# Installs llama-cpp-python into the virtual environment whose python is $1, built with CUDA when
# this machine has the CUDA toolkit (nvcc) and an NVIDIA GPU (nvidia-smi lists one); otherwise
# it leaves the CPU build to `pip install -e .`, which takes it from pip's wheel cache.
#
# pip's wheel cache knows a build only by its source, not by CMAKE_ARGS, so a CUDA build never
# goes there: it is built once per GPU architecture and CUDA version into a folder of our own
# (~/.cache/infertui/wheels/cuda-...), and the CPU wheel in pip's cache stays as it was.
# INFERTUI_CUDA=1 forces a CUDA build (no GPU needed, e.g. to build for another machine:
# set CUDA_ARCH too), INFERTUI_CUDA=0 forbids it.
set -eu
python=$1
version=$(sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml)
nvcc=$(command -v nvcc || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; } || true)
gpu_arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ' || true)
case "${INFERTUI_CUDA:-auto}" in
    0) exit 0 ;;
    1) [ -n "$nvcc" ] || { echo "INFERTUI_CUDA=1 but no nvcc found" >&2; exit 1; } ;;
    *)
        if [ -n "$gpu_arch" ] && [ -z "$nvcc" ]; then
            echo "note: an NVIDIA GPU is here but no CUDA toolkit (nvcc): llama-cpp-python is" \
                "built for the CPU. Install the toolkit and run this again to use the GPU." >&2
        fi
        [ -n "$nvcc" ] && [ -n "$gpu_arch" ] || exit 0 ;;
esac
arch=${CUDA_ARCH:-${gpu_arch:-native}}
cuda=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/infertui/wheels/cuda$cuda-sm$arch"
if ! ls "$wheels"/llama_cpp_python-"$version"-*.whl > /dev/null 2>&1; then
    echo "building llama-cpp-python $version with CUDA $cuda for sm_$arch (once; cached in $wheels)"
    # --no-binary: a CPU wheel an index might serve must never land in this cache as CUDA's
    CUDACXX="$nvcc" CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch" \
        "$python" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python \
        --wheel-dir "$wheels" "llama-cpp-python==$version"
fi
"$python" -m pip install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_python-"$version"-*.whl
# checked where a GPU is here to offload to (INFERTUI_CUDA=1 may build for another machine's)
if [ -n "$gpu_arch" ] &&
    ! "$python" -c 'import llama_cpp, sys; sys.exit(not llama_cpp.llama_supports_gpu_offload())'; then
    echo "llama-cpp-python $version in $wheels cannot offload to a GPU; remove that folder" \
        "and run this again" >&2
    exit 1
fi
echo "llama-cpp-python $version with CUDA (sm_$arch) installed"
