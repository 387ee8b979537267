#!/usr/bin/env bash
# Build llama.cpp with CUDA (sm_90: H100/H200) on the build machine, which has nvcc but no GPU,
# and pack it for bench/gpu_table.sh as .gpu/cuda-bin.tar.xz, so that a lent GPU's minutes go to
# measuring instead of compiling (about 30 minutes on 2 cores; 5.5 on the GPU machine's 16).
# Run from the project's root (it runs bench/gpu_prepare.sh first, for the source and wheels):
#
#   nohup bash bench/cuda_here.sh > /tmp/cuda-here.log 2>&1 &
#
# The toolkit here lacks cuBLAS and the driver's link stub: cuBLAS comes from its wheel (the
# GPU machine has its own at run time), and libcuda.so is a stub made from cuda.h's declarations
# (only linked against; the real driver serves at run time). Both go into the toolkit's folders.
# The pack is ~43 MB, so that .gpu/ stays under the device's 64 MiB carry limit only without
# .gpu/llama-src.tgz and numpy's wheel (the GPU machine has numpy): they move to .gpu-aside/.
set -euo pipefail
ROOT=$PWD W=${WORK:-/tmp/cuda-here} CUDA=${CUDA_HOME:-/usr/local/cuda}
LIB=$(readlink -f "$CUDA/lib64")
mkdir -p "$W" "$LIB/stubs"
bash bench/gpu_prepare.sh
SRC=.gpu/llama-src.tgz
[ -f .gpu-aside/llama-src.tgz ] && SRC=.gpu-aside/llama-src.tgz  # built from before
[ -d "$W/vendor/llama.cpp" ] || tar xzf "$SRC" -C "$W"
if [ ! -f "$CUDA/include/cublas_v2.h" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-cublas>=13.0,<14" -d "$W/whl"
  (cd "$W/whl" && unzip -q -o nvidia_cublas-*.whl)
  cp "$W"/whl/nvidia/cu13/include/*.h "$CUDA/include/"
  cp "$W"/whl/nvidia/cu13/lib/libcublas.so.13 "$W"/whl/nvidia/cu13/lib/libcublasLt.so.13 "$LIB/"
  ln -sf libcublas.so.13 "$LIB/libcublas.so" && ln -sf libcublasLt.so.13 "$LIB/libcublasLt.so"
fi
if [ ! -f "$LIB/stubs/libcuda.so" ]; then  # every CUresult function cuda.h declares, as a stub
  echo '#include <cuda.h>' | gcc -E -I"$CUDA/include" -x c - | tr '\n' ' ' \
    | grep -oE '\bCUresult( CUDAAPI)?\s+cu[A-Za-z0-9_]+\s*\(' | grep -oE 'cu[A-Za-z0-9_]+' | sort -u \
    | sed 's/.*/int &(void) { return 999; }/' > "$W/stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$LIB/stubs/libcuda.so" "$W/stub.c"
  ln -sf libcuda.so "$LIB/stubs/libcuda.so.1"
fi
# Newer CCCL headers than CUDA 13.0's (CCCL 3.0): ggml's top-k on the GPU uses CUB's DeviceTopK
# from CCCL 3.2 on, and sorts each row of the vocabulary whole before (with a 128k vocabulary
# and top-k in the graph, 64 sorts a step at 64 streams).
if [ ! -d "$W/cccl/nvidia/cu13/include/cccl" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: nvidia-cuda-cccl -d "$W/cccl"
  (cd "$W/cccl" && unzip -q -o nvidia_cuda_cccl-*.whl)
fi
cd "$W/vendor/llama.cpp"
# Portable CPU code (AVX2): the GPU machine's processor is not this one.
cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_CUDA_FLAGS="-I$W/cccl/nvidia/cu13/include/cccl" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_BMI2=ON > "$W/cmake.log"
LD_LIBRARY_PATH="$LIB/stubs" cmake --build build -j"$(nproc)" \
  --target llama llama-server llama-batched-bench
rm -rf "$W/pack" && mkdir -p "$W/pack/bin"
cp -a build/bin/*.so* build/bin/llama-server build/bin/llama-batched-bench "$W/pack/bin/"
cp -r "$W/llama_cpp" "$W/pack/" && rm -rf "$W/pack/llama_cpp/lib"
strip --strip-unneeded "$W"/pack/bin/*.so.* "$W"/pack/bin/llama-server "$W"/pack/bin/llama-batched-bench
cd "$ROOT"
tar cf - -C "$W/pack" bin llama_cpp | xz -9 -T"$(nproc)" > .gpu/cuda-bin.tar.xz
mkdir -p .gpu-aside && mv -f .gpu/llama-src.tgz .gpu/whl/numpy-*.whl .gpu-aside/ 2>/dev/null || true
du -sh .gpu .gpu/cuda-bin.tar.xz
