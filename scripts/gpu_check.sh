#!/usr/bin/env bash
# One call on a GPU host: the GPU tests, the benchmarks and the Python comparison with PyTorch
# SDPA, from a build made elsewhere (scripts/bundle_gpu.sh) or here. Logs go to a scratch folder
# and come back as ${OUT:-out}/results.tgz beside summary.txt (the device tool returns at most 8
# files).
#   usage: TILEFMHA_BUILD_DIR=gpu_bundle scripts/gpu_check.sh [STAGE...]
# Stages (default: all, in this order):
#   tests    every *_gpu_test binary (TILEFMHA_GPU_TESTS="engine splitkv_sm90" runs only those;
#            TILEFMHA_SM90_BENCH=1 adds the sm90_ws tile throughput table)
#   bench    bench/run_short.sh: FA3-protocol shapes through the dispatcher, verified
#   python   the Python package's tests (TILEFMHA_PYTEST=0 skips them) and
#            bench/python_overhead.py (host cost against SDPA),
#            where TILEFMHA_PYTHON_DIR (default BUILD/python) holds a package this python3 imports
#   compare  bench/compare_sdpa.py (bf16 and fp16, or TILEFMHA_COMPARE_DTYPES): the FA3 sweep
#            beside SDPA cuDNN and FA2
#   decode   bench/decode_sweep.py beside SDPA cuDNN (TILEFMHA_DECODE_ARGS narrows the shapes)
#   decode_calls  bench/decode_calls.py: microsecond decode calls as graphs of 20 beside SDPA
#            cuDNN, with each kernel's time (TILEFMHA_DECODE_CALLS_ARGS adds flags, e.g.
#            "--shapes '1,32,8,128,8192' --num-splits 16"); TILEFMHA_DECODE_CALLS_AB="DEFINES"
#            times the same build both ways instead, kernels compiled without and with those
#            defines (TILEFMHA_KERNEL_DEFINES, docs/jit.md), alternating over two rounds
#   sweep    tilefmha sweep --category smoke --variant fwd, timed: the 168 fp16/bf16 sm90_ws kernels
#            without dropout, softcap, bias or sink (every match of 114 smoke shapes)
#   serve    tilefmha sweep --category smoke --variant pagedkv, then batch_prefill, timed and
#            validated against the CPU reference: every paged shape through the paged kernels the
#            dispatcher picks (sm90_ws: TMA boxes for pages of 8+ keys, its gather entry below;
#            sm80_mma where sm90_ws does not fit; both KV layouts, any-size and specialized
#            pages); a mismatch fails the stage
#   sass     cuobjdump of the hdim-128 sm90_ws kernels: HGMMA count, registers, spills
#   serving_bench  bench/serving_bench.py: paged decode beside contiguous decode and SDPA
#            cuDNN, batch
#            prefill beside the varlen forward (TILEFMHA_SERVING_ARGS, e.g. "--only decode")
#   backward bench/compare_backward.py: the backward (fwd+bwd and alone) beside SDPA cuDNN and
#            FA2 on the FA3 sweep, bf16 (TILEFMHA_BACKWARD_ARGS adds flags, e.g. "--dtype fp16",
#            "--hdim 128" or "--deterministic-too")
#   fp8      python/tests/test_gpu_fp8.py (the e4m3 forward against the CPU backend), with
#            test_fp8.py (its PyTorch and ml_dtypes cases) and tests/python/test_fp8_bench.py,
#            then bench/fp8_bench.py: e4m3 TFLOP/s beside bf16 and the _scaled_mm ceiling, and
#            the accuracy report (TILEFMHA_FP8_ARGS adds flags, e.g. "--only accuracy"), then
#            bench/fp8_serving_bench.py: paged decode and prefill over an e4m3 cache beside bf16
#            (TILEFMHA_FP8_SERVING_ARGS adds flags)
#   distributed  context parallelism on every visible GPU: python/tests/test_gpu_distributed.py,
#            the C++ ring_nccl_gpu_test over PyTorch's NCCL, then bench/ring_bench.py under
#            torchrun (TILEFMHA_RING_ARGS adds flags)
#   env      the quick start's main job (`run --backend auto`, as scripts/quickstart.sh runs it
#            after building) and `python3 -m tilefmha` (the environment report)
# JIT cache: BUILD/jit_cache.tgz, where present, seeds the cache (carry one that an earlier call
# returned); TILEFMHA_RETURN_CACHE=1 returns the cache as ${OUT}/jit_cache.tgz for the next call.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${TILEFMHA_BUILD_DIR:-$root/build}
out=${OUT:-$root/out}
logs=$(mktemp -d /tmp/tilefmha-gpu-check.XXXXXX)
mkdir -p "$out"
stages=("$@")
((${#stages[@]})) || stages=(tests bench python compare decode sweep serve sass)
# Binaries carried from another machine find their data and CLI through the environment.
export TILEFMHA_DATA_DIR=${TILEFMHA_DATA_DIR:-$root/data}
export TILEFMHA_CLI=${TILEFMHA_CLI:-$build_dir/tools/tilefmha}
export PYTHONUNBUFFERED=1
export TILEFMHA_CACHE_DIR=${TILEFMHA_CACHE_DIR:-/tmp/tilefmha-cache}
python_dir=${TILEFMHA_PYTHON_DIR:-$build_dir/python}
summary=$logs/summary.txt

note() { echo "$*" | tee -a "$summary"; }
# Each test binary and benchmark step runs under this limit (seconds), so that one hung step
# cannot use up the device call and lose the logs of the others.
step_limit=${TILEFMHA_STEP_TIMEOUT:-400}
limited() { timeout --kill-after=10 "$step_limit" "$@"; }
elapsed() { echo "$((SECONDS - $1)) s"; }

{
  echo "# gpu_check $(date -u +%FT%TZ): ${stages[*]}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
} | tee "$summary"

# Several calls of this script in one device command (each stage under its own `timeout`) add to
# one summary and leave one results-<stages>.tgz each.
finish() {
  cat "$summary" >>"$out/summary.txt"
  tar czf "$out/results-$(IFS=-; echo "${stages[*]}").tgz" -C "$logs" .
  if [[ ${TILEFMHA_RETURN_CACHE:-0} == 1 && -d $TILEFMHA_CACHE_DIR ]]; then
    tar czf "$out/jit_cache.tgz" -C "$TILEFMHA_CACHE_DIR" .
  fi
}
trap finish EXIT

if [[ -f $build_dir/jit_cache.tgz ]]; then
  mkdir -p "$TILEFMHA_CACHE_DIR"
  tar xzf "$build_dir/jit_cache.tgz" -C "$TILEFMHA_CACHE_DIR" &&
    note "jit cache: seeded with $(find "$TILEFMHA_CACHE_DIR" -type f | wc -l) entries"
fi

if [[ ! -x "$build_dir/tools/tilefmha" ]]; then
  note "no build at $build_dir: build elsewhere and carry scripts/bundle_gpu.sh's gpu_bundle"
  exit 1
fi

status=0
run_tests() {
  local binaries=("$build_dir"/tests/*_gpu_test)
  if [[ -n ${TILEFMHA_GPU_TESTS:-} ]]; then
    binaries=()
    for name in $TILEFMHA_GPU_TESTS; do binaries+=("$build_dir/tests/${name}_gpu_test"); done
  fi
  for test_binary in "${binaries[@]}"; do
    local name start code
    name=$(basename "$test_binary")
    start=$SECONDS
    limited "$test_binary" --gtest_brief=1 >"$logs/$name.log" 2>&1
    code=$?
    ((code == 0)) || status=1
    note "$name: exit $code in $(elapsed "$start"), $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' \
      "$logs/$name.log" | tr '\n' ' ')"
  done
  grep -E "TFLOP/s" "$logs/fwd_sm90_gpu_test.log" >"$logs/sm90_tiles.txt" 2>/dev/null || true
}

run_bench() {
  local start=$SECONDS
  limited "$root/bench/run_short.sh" "$build_dir" "$logs" >"$logs/bench.log" 2>&1 || status=1
  note "bench: $(elapsed "$start")"
  grep -E "summary|geometric" "$logs/bench_fwd.txt" | tee -a "$summary"
}

run_python() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha" >"$logs/python_import.log" 2>&1; then
    note "python: skipped, tilefmha from $python_dir does not import in $(python3 --version 2>&1):"
    tail -1 "$logs/python_import.log" | tee -a "$summary"
    return
  fi
  local start=$SECONDS
  if [[ ${TILEFMHA_PYTEST:-1} == 1 ]]; then
    PYTHONPATH=$python_dir limited python3 -m pytest -q "$root/python/tests" "$root/tests/python" \
      >"$logs/pytest.log" 2>&1 || status=1
    note "pytest: $(tail -1 "$logs/pytest.log") in $(elapsed "$start")"
  fi
  PYTHONPATH=$python_dir limited python3 "$root/bench/python_overhead.py" >"$logs/python_overhead.txt" 2>&1 ||
    status=1
  note "$(head -1 "$logs/python_overhead.txt")"
  grep -A4 "^summary:" "$logs/python_overhead.txt" | tee -a "$summary"
}

run_compare() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha" >/dev/null 2>&1; then
    note "compare: skipped, tilefmha from $python_dir does not import"
    return
  fi
  local start
  for dtype in ${TILEFMHA_COMPARE_DTYPES:-bf16 fp16}; do
    start=$SECONDS
    PYTHONPATH=$python_dir limited python3 "$root/bench/compare_sdpa.py" --dtype "$dtype" \
      --csv "$logs/compare_sdpa_$dtype.csv" >"$logs/compare_sdpa_$dtype.txt" 2>&1 || status=1
    note "compare_sdpa $dtype: $(elapsed "$start"), $(grep -c ' ours ' "$logs/compare_sdpa_$dtype.txt") shapes"
  done
}

# The decode sweep beside SDPA cuDNN (bench/decode_sweep.py); TILEFMHA_DECODE_ARGS narrows it.
run_decode() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha" >/dev/null 2>&1; then
    note "decode: skipped, tilefmha from $python_dir does not import"
    return
  fi
  local start=$SECONDS
  # shellcheck disable=SC2086
  PYTHONPATH=$python_dir limited python3 "$root/bench/decode_sweep.py" ${TILEFMHA_DECODE_ARGS:-} \
    --csv "$logs/decode_sweep.csv" --json "$logs/decode_sweep.json" \
    >"$logs/decode_sweep.txt" 2>&1 || status=1
  note "decode sweep: $(elapsed "$start")"
  grep -iE "^summary|geomean|below" "$logs/decode_sweep.txt" | tee -a "$summary"
}

# Few-microsecond decode calls as a serving loop runs them (bench/decode_calls.py, graphs of 20
# calls; docs/bench.md); TILEFMHA_DECODE_CALLS_ARGS adds flags ("--sweep --max-kv-gb 4": the
# decode matrix up to 4 GB of K+V).
run_decode_calls() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha" >/dev/null 2>&1; then
    note "decode_calls: skipped, tilefmha from $python_dir does not import"
    return
  fi
  local start=$SECONDS
  if [[ -n ${TILEFMHA_DECODE_CALLS_AB:-} ]]; then
    # A/B of one build: the defines change the kernels' cache keys, so each side compiles its own.
    local round defines side
    for round in 1 2; do
      for defines in "" "$TILEFMHA_DECODE_CALLS_AB"; do
        side=without
        [[ -n $defines ]] && side=with
        local log="$logs/decode_calls_ab_${round}_${side}.txt"
        # shellcheck disable=SC2086
        TILEFMHA_KERNEL_DEFINES=$defines PYTHONPATH=$python_dir limited python3 \
          "$root/bench/decode_calls.py" ${TILEFMHA_DECODE_CALLS_ARGS:-} >"$log" 2>&1 || status=1
        note "decode calls, round $round, defines '${defines}':"
        grep -E " sk[0-9]+ |shapes: geomean" "$log" | tee -a "$summary"
      done
    done
    note "decode calls A/B: $(elapsed "$start")"
    return
  fi
  # shellcheck disable=SC2086
  PYTHONPATH=$python_dir limited python3 "$root/bench/decode_calls.py" --kernels \
    ${TILEFMHA_DECODE_CALLS_ARGS:-} >"$logs/decode_calls.txt" 2>&1 || status=1
  note "decode calls: $(elapsed "$start")"
  grep -E " sk[0-9]+ |shapes: geomean" "$logs/decode_calls.txt" | tee -a "$summary"
}

run_sweep() {
  local start=$SECONDS
  "$build_dir/tools/tilefmha" sweep --category smoke --variant fwd --arch sm90 --no-progress \
    --filter "c.pipeline == 'sm90_ws' and c.dtype != 'fp8_e4m3' and not c.dropout and not c.softcap and c.bias == 'none' and not c.sink_logit" \
    --csv "$logs/sweep_smoke_fwd.csv" --json "$logs/sweep_smoke_fwd.json" \
    >"$logs/sweep.log" 2>&1 || status=1
  note "sweep smoke fwd: $(elapsed "$start"), $(tail -3 "$logs/sweep.log" | tr '\n' ' ')"
}

# The serving families: the smoke tier's paged shapes (bf16, head dim 128, mask the only
# feature) against the batch-mode pagedkv and the batch_prefill sm80_mma kernels, each match
# timed and its output compared with the CPU reference (--validate, also the default for these
# variants). The summary gets each sweep's counts line and its first mismatched rows.
run_serve() {
  local filter="(c.pipeline == 'sm80_mma' or c.pipeline == 'sm90_ws') and c.dtype == 'bf16' and c.hdim_q == 128 and c.pad_seqlen_k and not c.pad_hdim_q and not c.lse and not c.softcap and not c.sink_logit and not c.dropout and c.bias == 'none' and c.mask != 'window' and (c.mode == 'batch' or c.family == 'batch_prefill')"
  local variant start log
  for variant in pagedkv batch_prefill; do
    start=$SECONDS
    log=$logs/serve_$variant.log
    limited "$build_dir/tools/tilefmha" sweep --category smoke --variant "$variant" --arch sm90 \
      --no-progress --validate --filter "$filter" \
      --csv "$logs/serve_smoke_$variant.csv" --json "$logs/serve_smoke_$variant.json" \
      >"$log" 2>&1 || status=1
    note "serve smoke $variant: $(elapsed "$start"), $(grep -E 'built|shapes served' "$log" | tr -s ' ' | tr '\n' ' ')"
    grep -E '  (mismatch|error)  ' "$log" | head -5 | tee -a "$summary"
    grep -m 1 -A 1 "^tilefmha: error" "$log" | tee -a "$summary"
  done
}

# SASS evidence for the default hdim-128 sm90_ws kernels: HGMMA in the main loop, registers and
# spills (cuobjdump on the cubins the JIT cache holds after their 64-byte header).
# TILEFMHA_SASS_FILTER replaces the kernel filter; TILEFMHA_SASS_FULL=1 also keeps each kernel's
# whole SASS (sass_<n>.txt) for reading its main loop.
run_sass() {
  local cache=$logs/sass_cache
  local default_filter="c.pipeline == 'sm90_ws' and c.dtype == 'bf16' and c.hdim_q == 128 and c.mode == 'batch' and c.lse == false and c.bias == 'none' and not c.dropout and not c.softcap and not c.sink_logit and c.block_n == 128"
  "$build_dir/tools/tilefmha" build fwd --arch sm90 --compile-only --no-progress --cache-dir "$cache" \
    --filter "${TILEFMHA_SASS_FILTER:-$default_filter}" \
    >"$logs/sass_build.log" 2>&1 || status=1
  local n=0
  for entry in "$cache"/*; do
    [[ -f $entry ]] || continue
    tail -c +65 "$entry" >"$logs/kernel.cubin"
    n=$((n + 1))
    [[ ${TILEFMHA_SASS_FULL:-0} == 1 ]] && cuobjdump -sass "$logs/kernel.cubin" >"$logs/sass_$n.txt" 2>&1
    {
      cuobjdump -res-usage "$logs/kernel.cubin" | grep -E "Function|REG"
      echo "HGMMA instructions: $(cuobjdump -sass "$logs/kernel.cubin" | grep -c HGMMA)"
      cuobjdump -sass "$logs/kernel.cubin" | grep -m 3 HGMMA
      echo "local loads/stores (spills): $(cuobjdump -sass "$logs/kernel.cubin" | grep -c -E 'STL|LDL')"
    } >>"$logs/sass.txt" 2>&1
  done
  rm -f "$logs/kernel.cubin"
  rm -rf "$cache"
  note "sass: $(grep -c Function "$logs/sass.txt" 2>/dev/null) kernels, $(grep 'HGMMA instructions' "$logs/sass.txt" | tr '\n' ' ')"
}

run_serving_bench() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha" >/dev/null 2>&1; then
    note "serving: skipped, tilefmha from $python_dir does not import"
    return
  fi
  local start=$SECONDS
  # shellcheck disable=SC2086
  PYTHONPATH=$python_dir limited python3 "$root/bench/serving_bench.py" ${TILEFMHA_SERVING_ARGS:-} \
    --json "$logs/serving_bench.json" >"$logs/serving_bench.txt" 2>&1 || status=1
  note "serving bench: $(elapsed "$start")"
  sed -n '/^summary:/,$p' "$logs/serving_bench.txt" | tee -a "$summary"
}

# The backward beside SDPA cuDNN and FA2; --dtype bf16 comes first so that a --dtype in
# TILEFMHA_BACKWARD_ARGS overrides it (argparse keeps the last).
run_backward() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha" >/dev/null 2>&1; then
    note "backward: skipped, tilefmha from $python_dir does not import"
    return
  fi
  local start=$SECONDS
  # shellcheck disable=SC2086
  PYTHONPATH=$python_dir limited python3 "$root/bench/compare_backward.py" --dtype bf16 \
    ${TILEFMHA_BACKWARD_ARGS:-} --csv "$logs/compare_backward.csv" \
    --json "$logs/compare_backward.json" >"$logs/compare_backward.txt" 2>&1 || status=1
  note "backward bench: $(elapsed "$start"), $(grep -cE '^d[0-9]+ s[0-9]+ ' "$logs/compare_backward.txt") shapes"
  sed -n '/^summary:/,$p' "$logs/compare_backward.txt" | tee -a "$summary"
}

# The fp8 forward: its GPU tests (with the CPU suite's PyTorch and ml_dtypes cases and the
# bench's own tests), then the benchmark and accuracy report.
run_fp8() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha" >/dev/null 2>&1; then
    note "fp8: skipped, tilefmha from $python_dir does not import"
    return
  fi
  local start=$SECONDS
  PYTHONPATH=$python_dir limited python3 -m pytest -q -rs "$root/python/tests/test_gpu_fp8.py" \
    "$root/python/tests/test_fp8.py" "$root/tests/python/test_fp8_bench.py" \
    >"$logs/pytest_fp8.log" 2>&1 || status=1
  note "pytest fp8: $(tail -1 "$logs/pytest_fp8.log") in $(elapsed "$start")"
  start=$SECONDS
  # shellcheck disable=SC2086
  PYTHONPATH=$python_dir limited python3 "$root/bench/fp8_bench.py" ${TILEFMHA_FP8_ARGS:-} \
    --json "$logs/fp8_bench.json" >"$logs/fp8_bench.txt" 2>&1 || status=1
  note "fp8 bench: $(elapsed "$start")"
  sed -n '/^summary:/,$p' "$logs/fp8_bench.txt" | tee -a "$summary"
  start=$SECONDS
  # shellcheck disable=SC2086
  PYTHONPATH=$python_dir limited python3 "$root/bench/fp8_serving_bench.py" \
    ${TILEFMHA_FP8_SERVING_ARGS:-} --json "$logs/fp8_serving_bench.json" \
    >"$logs/fp8_serving_bench.txt" 2>&1 || status=1
  note "fp8 serving bench: $(elapsed "$start")"
  sed -n '/^summary:/,$p' "$logs/fp8_serving_bench.txt" | tee -a "$summary"
}

# Context parallelism on every visible GPU (one process each): the Python ring and head-parallel
# tests (simulated rings on one GPU, NCCL across two or more), the C++ RingAttention test over
# NCCL, then bench/ring_bench.py (TILEFMHA_RING_ARGS, e.g. "--seqlen 131072,524288") against one
# GPU, on every GPU or on each count of TILEFMHA_RING_GPUS (e.g. "2 4"). NVLink multicast stays
# off. NCCL for the C++ side is the one PyTorch ships.
run_distributed() {
  if ! PYTHONPATH=$python_dir python3 -c "import tilefmha, torch.distributed" >/dev/null 2>&1; then
    note "distributed: skipped, tilefmha from $python_dir or torch.distributed does not import"
    return
  fi
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local gpus start=$SECONDS
  gpus=$(nvidia-smi -L | wc -l)
  PYTHONPATH=$python_dir:$root/python/tests limited python3 -m pytest -q -rs \
    "$root/python/tests/test_gpu_distributed.py" >"$logs/pytest_distributed.log" 2>&1 || status=1
  note "pytest distributed ($gpus GPUs): $(tail -1 "$logs/pytest_distributed.log") in $(elapsed "$start")"
  if [[ -z ${TILEFMHA_NCCL_LIBRARY:-} ]]; then
    TILEFMHA_NCCL_LIBRARY=$(python3 -c "import glob, os, nvidia.nccl as n; \
print((glob.glob(os.path.join(list(n.__path__)[0], 'lib', 'libnccl.so*')) or [''])[0])" 2>/dev/null)
    export TILEFMHA_NCCL_LIBRARY
  fi
  start=$SECONDS
  if [[ -x $build_dir/tests/ring_nccl_gpu_test ]]; then
    limited "$build_dir/tests/ring_nccl_gpu_test" >"$logs/ring_nccl_gpu_test.log" 2>&1 || status=1
    note "ring_nccl_gpu_test (NCCL ${TILEFMHA_NCCL_LIBRARY:-not found}): $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$logs/ring_nccl_gpu_test.log" | tr '\n' ' ') in $(elapsed "$start")"
  fi
  local count
  for count in ${TILEFMHA_RING_GPUS:-$gpus}; do
    start=$SECONDS
    # shellcheck disable=SC2086
    PYTHONPATH=$python_dir limited torchrun --standalone --nproc_per_node "$count" \
      "$root/bench/ring_bench.py" ${TILEFMHA_RING_ARGS:-} --json "$logs/ring_bench_$count.json" \
      >"$logs/ring_bench_$count.txt" 2>&1 || status=1
    note "ring bench ($count of $gpus GPUs): $(elapsed "$start")"
    sed -n '/^  *seqlen/,$p' "$logs/ring_bench_$count.txt" | tee -a "$summary"
  done
}

# The quick start's main job on this GPU host, and the Python environment report.
run_env() {
  "$build_dir/tools/tilefmha" run --backend auto >"$logs/quickstart.log" 2>&1 || status=1
  note "quickstart (run --backend auto): $(tail -2 "$logs/quickstart.log" | tr '\n' ' ')"
  PYTHONPATH=$python_dir python3 -m tilefmha >"$logs/python_environment.txt" 2>&1 || status=1
  note "python -m tilefmha:"
  tee -a "$summary" <"$logs/python_environment.txt"
}

for stage in "${stages[@]}"; do
  case $stage in
    tests) run_tests ;;
    bench) run_bench ;;
    python) run_python ;;
    compare) run_compare ;;
    sweep) run_sweep ;;
    serve) run_serve ;;
    decode) run_decode ;;
    decode_calls) run_decode_calls ;;
    sass) run_sass ;;
    env) run_env ;;
    serving_bench) run_serving_bench ;;
    backward) run_backward ;;
    fp8) run_fp8 ;;
    distributed) run_distributed ;;
    *)
      note "unknown stage '$stage' (tests, bench, python, compare, decode, decode_calls, sweep, serve, sass, env, serving_bench, backward, fp8, distributed)"
      status=2
      ;;
  esac
done
note "gpu_check: exit $status"
exit $status
