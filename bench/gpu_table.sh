#!/usr/bin/env bash
# Issue 10's GPU table in one call on a lent GPU machine (no network), from the project's root,
# with `.gpu/` carried. On a machine with the package registries, first:
#
#   bash bench/gpu_prepare.sh    # .gpu/: llama.cpp's source and the wheels (~25 MB), or
#   bash bench/cuda_here.sh      # that, and llama.cpp built with CUDA here (bench/README.md)
#
# then on the GPU machine:
#
#   bash bench/gpu_table.sh            # every stage, in order of importance, within BUDGET_S
#   STAGES="1b 8b" bash bench/gpu_table.sh
#
# llama.cpp comes from .gpu/cuda-bin.tar.xz when it is there (bench/cuda_here.sh builds it for
# sm_90: the GPU's minutes go to measuring), else it is built here from .gpu/llama-src.tgz
# (build_here). Models are random-weight Llama shapes (bench/make_model.py). Every figure comes
# from bench/bench_gpu.py: raw llama-batched-bench, infertui and llama-server from the same
# build, side by side, with the same slots (-np 64) as the earlier table in bench/README.md.
# Results go to $OUT.
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/gpu-out}
G=$PWD/.gpu
BUDGET_S=${BUDGET_S:-560}
STAGES=${STAGES:-"setup models smoke 1b engine host 8b long 256 hop"}
mkdir -p "$OUT" /root/site /root/pkgs/infertui /root/lcp
say() { echo "[$(($(date +%s) - T0)) s] $*"; }
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
want() { [[ " $STAGES " == *" $1 "* ]] && [ "$(left)" -gt "${2:-30}" ]; }

export PYTHONPATH=/root/site:/root/pkgs PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/root/cache
export XDG_CONFIG_HOME=/root/x/config XDG_DATA_HOME=/root/x/data XDG_STATE_HOME=/root/x/state
BIN=/root/lcp/bin
use_bindings() {  # the llama_cpp bindings over the libraries in $BIN, and the project itself
  rm -rf /root/pkgs/llama_cpp && cp -r /root/lcp/llama_cpp /root/pkgs/llama_cpp
  rm -rf /root/pkgs/llama_cpp/lib && ln -sfn "$BIN" /root/pkgs/llama_cpp/lib
  cp infertui_pkg/__init__.py /root/pkgs/infertui/
  ln -sfn "$PWD/core" /root/pkgs/infertui/core && ln -sfn "$PWD/tui" /root/pkgs/infertui/tui
}
build_here() {  # llama.cpp with CUDA for this GPU, from the carried source: ~5.5 minutes on 16
  # cores. Detached, so that a caller with a limit per command can call again and wait for it.
  local src=/root/lcp/vendor/llama.cpp arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
  arch=${CUDA_ARCH:-$arch}
  if [ ! -f /root/lcp/build.started ]; then
    [ -f "$G/llama-src.tgz" ] || { say "no .gpu/cuda-bin.tar.xz nor .gpu/llama-src.tgz"; return 1; }
    tar xzf "$G/llama-src.tgz" -C /root/lcp
    cmake -S "$src" -B "$src/build" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
      -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release > /root/lcp/cmake.log 2>&1 \
      || { tail -30 /root/lcp/cmake.log; return 1; }
    touch /root/lcp/build.started
    setsid nohup bash -c "cmake --build '$src/build' -j$(nproc) --target llama llama-server \
      llama-batched-bench > /root/lcp/build.log 2>&1; echo \$? > /root/lcp/build.rc" \
      > /dev/null 2>&1 < /dev/null &
  fi
  local waited=0
  while [ ! -f /root/lcp/build.rc ] && [ $waited -lt "${WAIT_S:-420}" ]; do
    sleep 5 && waited=$((waited + 5))
  done
  [ "$(cat /root/lcp/build.rc 2> /dev/null)" = 0 ] && return 0
  say "llama.cpp not built (yet): /root/lcp/build.log; call again to wait for it"
  return 1
}
build_loops() {  # the host's C loops (lone runs, top-k rows: setup.py's extension) for this
  # machine's Python. git ignores the built library, so it never travels with the tree. Without
  # the module's init (hot_loops.c), no Python headers are needed: Python finds the file by its
  # name and calls it through ctypes.
  local ext
  ext=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  if gcc -O3 -shared -fPIC core/engine/llama/fast_rows.c core/engine/llama/lone_run.c \
      -o "core/engine/llama/_hot_loops$ext"; then
    python3 -c 'from infertui.core.engine.llama import fast_rows, lone_run
print("C loops: lone runs", lone_run.AVAILABLE, "/ top-k rows", fast_rows.FAST_ROWS is not None)'
  else
    say "the C loops are not built (no gcc?): one stream and top-k rows go in Python"
  fi
}
cuda_ok() {  # llama.cpp loads and sees the GPU (on a machine without one: loads)
  python3 -c 'import shutil; from infertui.core.engine.devices import gpus; d = gpus()
print("devices:", d); assert d or not shutil.which("nvidia-smi")'
}

if want setup; then
  [ -d "$G/whl" ] || { say "no .gpu/: bench/gpu_prepare.sh fills it (on a machine with the" \
    "package registries), and .gpu/ travels with the tree"; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /root/site "$G"/whl/*.whl
  [ -f "$G/cuda-bin.tar.xz" ] && tar xJf "$G/cuda-bin.tar.xz" -C /root/lcp
fi
# The CUDA runtime and cuBLAS that the carried build links to, wherever this machine keeps them
# (one search: /opt holds a whole PyTorch environment, seconds of the GPU's time to walk)
for dir in $(find /usr/local /opt /usr/lib \( -name libcudart.so.13 -o -name libcublas.so.13 \
  -o -name libcublasLt.so.13 \) -printf '%h\n' 2>/dev/null | awk '!seen[$0]++'); do
  LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir
done
export LD_LIBRARY_PATH
[ -x /root/lcp/vendor/llama.cpp/build/bin/llama-server ] && BIN=/root/lcp/vendor/llama.cpp/build/bin
want setup && use_bindings
if ! LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH cuda_ok; then  # no carried build, or it fails here
  say "building llama.cpp here (about 5.5 minutes)"
  build_here || exit 1
  BIN=/root/lcp/vendor/llama.cpp/build/bin && use_bindings
  LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH cuda_ok || exit 1
fi
export LD_LIBRARY_PATH=$BIN:$LD_LIBRARY_PATH
SERVER=$BIN/llama-server
want setup && build_loops
say "ready: $BIN"

SMALL=${SMALL:-1b:128256} LARGE=${LARGE:-8b:32000}  # SHAPE:VOCAB (tiny:128256 tries it on a CPU)
M1=/root/cache/infertui/bench/${SMALL%:*}-v${SMALL#*:}-q4km.gguf
M8=/root/cache/infertui/bench/${LARGE%:*}-v${LARGE#*:}-q4km.gguf
if want models; then  # both at once: writing F16 is one core's work, quantizing uses them all
  say "models"
  python3 bench/make_model.py "$M1" --shape "${SMALL%:*}" --vocab "${SMALL#*:}" &
  python3 bench/make_model.py "$M8" --shape "${LARGE%:*}" --vocab "${LARGE#*:}" &
  wait
  ls -la /root/cache/infertui/bench/
fi

HOST_ARGS=()
if want smoke; then  # one host with --parallel auto: the slots, device and VRAM it logs; a
  # greedy and a sampled request. If sampling in the graph fails here, the benches go on without.
  say "smoke: --parallel auto"
  python3 -m infertui.app.cli host --headless --no-p2p --http 127.0.0.1:18090 --model "$M1" \
    --parallel auto > "$OUT/smoke.log" 2>&1 &
  for _ in $(seq 1 90); do curl -sf http://127.0.0.1:18090/health > /dev/null && break; sleep 1; done
  ok=1 id=$(curl -s http://127.0.0.1:18090/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  for t in 0 0.8; do
    r=$(curl -sf http://127.0.0.1:18090/v1/completions -H 'content-type: application/json' -d \
      "{\"model\": \"$id\", \"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"temperature\": $t, \"ignore_eos\": true}") || ok=0
    echo "temp $t: ${r:0:300}"
  done
  curl -s http://127.0.0.1:18090/v1/host/metrics | head -c 1200; echo
  kill %1; wait
  grep -iE "slot|device|offload|VRAM|MiB|error|Traceback" "$OUT/smoke.log" | head -12
  [ $ok = 1 ] || { HOST_ARGS=(--host-arg=--backend-sampling --host-arg=off); say "smoke failed"; }
fi

bench() {  # NAME TIMEOUT ARGS...: one bench_gpu run, its table into $OUT/NAME.md (beside
  # llama-server unless SERVER is unset)
  local name=$1 limit=$2
  shift 2
  say "bench $name ($*)"
  timeout "$limit" python3 bench/bench_gpu.py ${SERVER+"--llama-server"} ${SERVER+"$SERVER"} \
    --batched-bench "$BIN/llama-batched-bench" --tokens 128 --rounds 2 --parallel 64 \
    --json "$OUT/$name.json" "${HOST_ARGS[@]}" "$@" 2>&1 | tee "$OUT/$name.md" | grep -v '^$'
}
want 1b 120 && bench 1b $(($(left) - 20)) --model "$M1" --streams 1,64 --temps 0,0.8 --prompts short
if want engine 60; then  # the same model in-process (no HTTP): the engine's own share of the gap
  say "engine alone"
  for sampling in auto off; do  # in the graph (auto, on a GPU), then on the host
    timeout $(($(left) - 5)) python3 bench/bench_inprocess.py "$M1" --streams 1,64 \
      --temps 0,0.8 --rounds 2 --backend-sampling $sampling 2>&1 | tee -a "$OUT/engine.md"
  done
fi
# The same rows with sampling on the host, beside the graph's (which the 1b stage used)
want host 100 && (unset SERVER; bench host $(($(left) - 20)) --model "$M1" --streams 1,64 --temps 0,0.8 \
  --prompts short --host-arg=--backend-sampling --host-arg=off)
want 8b 90 && bench 8b $(($(left) - 20)) --model "$M8" --streams 1,64 --temps 0 --prompts short
want long 80 && bench long $(($(left) - 10)) --model "$M8" --streams 32 --temps 0 --prompts long \
  --ctx 2048  # the synthetic vocabulary reads the long prompt as ~1,600 tokens

want 256 90 && bench s256 $(($(left) - 10)) --model "$M1" --streams 256 --temps 0 --prompts short \
  --parallel 256
if want hop 150; then  # issue 15's hop with cores to spare: an instant upstream, its own CPU
  say "hop"
  timeout $(($(left) - 5)) python3 bench/bench_upstream.py --instant --apart --streams 1,32 \
    --reps 2 --ttft-reps 12 --processes 4 2>&1 | tee "$OUT/hop.md" | grep -v '^$'
fi
tar czf "$OUT/logs.tgz" -C /root/cache/infertui/bench logs 2>/dev/null
say "done"
