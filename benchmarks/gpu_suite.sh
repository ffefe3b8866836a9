#!/usr/bin/env bash
# kseq's GPU checks and measurements in one command, in parts that fit calls of at most
# 10 minutes on a lent GPU machine (one H100, 16 cores, no network) with the offline
# TensorFlow bundle of ../shared/gpu/build-bundle.sh unpacked at $KSEQ_BUNDLE (/root/k).
#
#   benchmarks/gpu_suite.sh [PART...]          # from anywhere; runs in the repository root
#
# Parts, in the order `all` (the default) runs them; each runs alone too. Durations on one
# H100 are estimates unless marked measured:
#   gpu-tests   python3 -m pytest -m gpu -n 4 (tests/test_gpu.py)    ~3-4 min (38 tests: 3 min, 2026-11-24)
#   suite       the default suite, less the gpu tests (run above), -n 12, 3 GiB of GPU a logical device
#                                                                      ~5-9 min (never timed on a GPU)
#   train-step  benchmarks/train_step.py, base size, kseq and KerasHub, float32 (TF32) and
#               mixed_bfloat16, each with and without XLA (8 configurations)  ~6-9 min
#   torch       benchmarks/torch_transformer.py, the PyTorch reference of the same step, with
#               the machine's own python3 (PyTorch, no TensorFlow)      ~3-5 min (2 torch.compile)
#   decode      benchmarks/decode.py, its defaults                      ~3-5 min
#   recipe      kseq-train translate --preset gpu --max-minutes $RECIPE_MINUTES (5): training,
#               then decoding choice, test and export                    ~RECIPE_MINUTES + 2-3 min
# Parts of the train-step lease (`lease` runs bundle torch-collect trace recommended xla-matrix):
#   bundle      gathers bundle parts carried in .gpu/ (build-bundle.sh's partNN/, zstd/, SUMS)
#               into $KSEQ_BUNDLE_STORE across calls and unpacks them into $KSEQ_BUNDLE once SUMS
#               checks; does nothing where $KSEQ_BUNDLE/env.sh exists
#   torch-start starts torch_transformer.py (PyTorch's rows) in the background (setsid) and
#               returns: the first call's part, while the bundle is still being sent
#   torch-collect waits (TORCH_WAIT_S, 240) for that run and brings its JSON; first in `lease`,
#               so that PyTorch is off the GPU before kseq is measured
#   trace       train_step.py --configs kseq-bfloat16 --profile: where a base step's time goes;
#               the raw trace comes back gzipped ($OUT/trace/), trace_report.py reads it here
#   recommended the base step in the settings a user would pick, each by default and with compiled
#               blocks (+compiled_blocks, --jit-compile blocks), same machine and hour
#   xla-matrix  xla_compile.py --matrix at base size: compile time and step under XLA settings
# The part that decides kseq's GPU defaults, one call of at most 560 s after the bundle:
#   decide      PyTorch's compiled and eager bf16 rows in the foreground (~90 s); kseq's default
#               base step (mixed_bfloat16); then compiled blocks (+compiled_blocks, the model's
#               `compiled_blocks=True`) under each compile setting of
#               kseq.training.devices.xla_compile_flags, cheapest first, each capped at $DECIDE_CAP_S
#               (90) s, the default setting again on its warm caches, and whole-step XLA last. Rows are
#               written as they finish; decide_summary.py prints the table, the fastest configuration
#               and its ratio to compiled PyTorch. Brings back decide.log, decide.json and
#               decide-rows.json (the table). The GPU paths removed after commit 0fd0d8a are A/B'd
#               from a checkout of that commit, whose decide part still times each alone.
#
# Each part writes $OUT/<part>.log (its output) and $OUT/<part>.json: {part, status, rc,
# started_utc, ended_utc, seconds, command, python, nvidia_smi (before), gpu_after, result},
# `result` holding what the part measured (pytest: counts, failures, slowest tests, from a
# junit XML kept in $GPU_SUITE_WORK; benchmarks: their JSON output, or the rows their log
# printed where they were stopped before writing it; recipe: metrics.json and phases.json).
# Two files a part, so four parts bring back 8 files, the device's limit. $OUT defaults to
# ./gpu-out.
#
# One invocation stops itself within $GPU_SUITE_BUDGET_S seconds (540; 0 = no limit): each
# part runs under `timeout` for what is left (SIGTERM, SIGKILL 20 s later), less what it
# keeps for the part after it ($TORCH_RESERVE_S, 240, before `torch`; $DECODE_RESERVE_S,
# 180, before `decode`); a part that would start with less than 60 s is skipped, and its
# JSON says so. A stopped recipe
# saves and exits 75; run the `recipe` part again on the same (warm) machine and it resumes
# from $GPU_SUITE_WORK/runs/translate-gpu ($RECIPE_FRESH=1 starts over).
#
# Plan for a session's 15 minutes of device time (start, idle waits and transfers count), after
# `../shared/gpu/build-bundle.sh .gpu` here (17 parts; it carries CUPTI and ptxas 12.6.85):
#   1. call 1, carrying .gpu/part00 .gpu/zstd .gpu/SUMS:
#        benchmarks/gpu_suite.sh bundle
#   2. calls 2-17, one a part, carrying .gpu/partNN:  benchmarks/gpu_suite.sh bundle
#      (about 130 s for all 17 parts; each call's bundle part only copies until SUMS checks)
#   3. call 18, timeout_s 600:  GPU_SUITE_BUDGET_S=560 benchmarks/gpu_suite.sh decide
#        (PyTorch ~90 s, the default ~40 s, compiled rows what is left); its table
#        decides kseq's GPU defaults. (The older `lease`, torch-collect trace recommended
#        xla-matrix, needs torch-start in call 1 instead; trace a base step with `trace`.)
#   4. with 7 or more minutes of the session left: benchmarks/gpu_suite.sh recipe (5 minutes of
#      training, then test and export), else `trace`. gpu-tests, decode, train-step
#      (KerasHub's rows) and suite need a lease of their own.
# `lease` brings back 7 files: trace.log, trace.json and the gzipped raw trace, recommended.*,
# xla-matrix.*; `bundle` and `torch-collect` print to the call's output only there.
# `train_step.py --profile` keeps the profiler's own messages (`profiler_messages`), so a trace
# without GPU events says why, and trace_report.py lists the planes it saw.
# Only what is under $OUT comes back, and the device empties it before each call: collect
# after each.
#
# Settings (environment):
#   OUT                  results folder (default ./gpu-out)
#   KSEQ_BUNDLE          the unpacked bundle (default /root/k): its env.sh is sourced and
#                        TensorFlow runs with `python3` (the system python, the bundle's site on
#                        PYTHONPATH); without it, TF_PYTHON defaults to .venv/bin/python
#   TF_PYTHON            python for the TensorFlow parts
#   TORCH_PYTHON         python for `torch` (default: python3 on PATH less the bundle's entries),
#                        run with the bundle's PYTHONPATH and LD_LIBRARY_PATH entries removed
#                        (the bundle's numpy, cuBLAS and cuDNN would shadow PyTorch's own)
#   GPU_SUITE_BUDGET_S   seconds for one invocation (540; 0: no limit)
#   GPU_SUITE_WORK       intermediate files, recipe runs (default ${TMPDIR:-/tmp}/kseq-gpu-suite)
#   GPU_SUITE_SMOKE=1    tiny settings to check the script without a GPU (pytest parts only collect)
#   GPU_TESTS_WORKERS (4), SUITE_WORKERS (12), SUITE_MARK ("not slow and not gpu"),
#   KSEQ_TEST_GPU_MEMORY_MB (3072 in `suite`), TRAIN_STEP_SIZE (base), TRAIN_STEP_STEPS (20),
#   TRAIN_STEP_WARMUP (5), TRAIN_STEP_CONFIGS, TRAIN_STEP_CONFIG_TIMEOUT (150), TORCH_CONFIGS, DECODE_ARGS, RECIPE_MINUTES (5),
#   RECIPE_ARGS, RECIPE_FRESH, TORCH_RESERVE_S (240), DECODE_RESERVE_S (180),
#   KSEQ_BUNDLE_SRC (.gpu), KSEQ_BUNDLE_STORE (/root/k-parts), TORCH_HOME_RUN ($HOME/kseq-torch: the
#   background PyTorch run's folder, outside the checkout), TORCH_WAIT_S (240), TRACE_CONFIG
#   (kseq-bfloat16), RECOMMENDED_CONFIGS (kseq-bfloat16,kseq-float32), XLA_MATRIX_ARGS,
#   XLA_MATRIX_RESERVE_S (180: kept for xla-matrix by the parts before it)
set -uo pipefail

ALL_PARTS=(gpu-tests suite train-step torch decode recipe)
LEASE_PARTS=(bundle torch-collect trace recommended xla-matrix)
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(all)
expanded=()
for part in "${parts[@]}"; do
  case "$part" in
    all) expanded+=("${ALL_PARTS[@]}") ;;
    lease) expanded+=("${LEASE_PARTS[@]}") ;;
    gpu-tests | suite | train-step | torch | decode | recipe | bundle | torch-start | torch-collect | trace \
      | recommended | xla-matrix | decide) expanded+=("$part") ;;
    -h | --help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown part '$part': choose from all lease ${ALL_PARTS[*]} ${LEASE_PARTS[*]} torch-start decide" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
WORK=${GPU_SUITE_WORK:-${TMPDIR:-/tmp}/kseq-gpu-suite}
mkdir -p "$WORK" || exit 1
BUNDLE=${KSEQ_BUNDLE:-/root/k}
SMOKE=${GPU_SUITE_SMOKE:-0}
BUDGET=${GPU_SUITE_BUDGET_S:-540}

# The environment PyTorch gets: the caller's, less anything of the bundle's (env.sh
# prepends its site to PYTHONPATH, its CUDA libraries to LD_LIBRARY_PATH, ptxas to PATH).
without_bundle() {
  local kept="" entry bundle_real
  bundle_real=$(realpath -m "$BUNDLE")
  IFS=: read -r -a entries <<<"${1:-}"
  for entry in "${entries[@]}"; do
    case "$entry" in "" | "." | "$BUNDLE"/* | "$bundle_real"/*) continue ;; esac
    kept="${kept:+$kept:}$entry"
  done
  printf '%s' "$kept"
}
CLEAN_PATH=$(without_bundle "$PATH")
CLEAN_PYTHONPATH=$(without_bundle "${PYTHONPATH:-}")
CLEAN_LD_LIBRARY_PATH=$(without_bundle "${LD_LIBRARY_PATH:-}")
TORCH_PYTHON=${TORCH_PYTHON:-$(PATH=$CLEAN_PATH command -v python3)}
SUMMARY_PYTHON=${SUMMARY_PYTHON:-$TORCH_PYTHON}  # any python 3; the standard library only
export PYTHONUNBUFFERED=1

CLEAN_ENV=(env -u XLA_FLAGS PATH="$CLEAN_PATH" PYTHONPATH="$CLEAN_PYTHONPATH" LD_LIBRARY_PATH="$CLEAN_LD_LIBRARY_PATH")

TF_READY=""
tf_env() {  # sets TF_PYTHON and the bundle's environment, once (after a `bundle` part)
  [ -n "$TF_READY" ] && return
  if [ -f "$BUNDLE/env.sh" ]; then
    # shellcheck disable=SC1091
    source "$BUNDLE/env.sh"
    TF_PYTHON=${TF_PYTHON:-python3}
    TF_FROM="bundle $BUNDLE"
  else
    TF_PYTHON=${TF_PYTHON:-$ROOT/.venv/bin/python}
    TF_FROM="no bundle at $BUNDLE"
  fi
  export TF_FORCE_GPU_ALLOW_GROWTH=${TF_FORCE_GPU_ALLOW_GROWTH:-true}  # train_step.py's parent holds the GPU while its children run
  export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
  TF_READY=1
}

gpu_state() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total,utilization.gpu,temperature.gpu,clocks.sm,clocks.max.sm,power.draw \
      --format=csv 2>&1 | head -20
  else
    echo "no nvidia-smi"
  fi
}

# What a part leaves for the part after it in the same invocation, so that `train-step torch`
# always measures PyTorch (train_step.py's last configurations are cut instead) and
# `gpu-tests decode` always decodes.
reserve_for() {
  case "${1:-}" in
    torch) echo "${TORCH_RESERVE_S:-240}" ;;
    decode) echo "${DECODE_RESERVE_S:-180}" ;;
    xla-matrix) echo "${XLA_MATRIX_RESERVE_S:-180}" ;;
    *) echo 0 ;;
  esac
}
NEXT_PART=""

remaining() {  # seconds this invocation may still spend on a part
  if [ "$BUDGET" -le 0 ]; then echo 0; else echo $((BUDGET - SECONDS - 10 - $(reserve_for "$NEXT_PART"))); fi
}

# run_part PART PYTHON_LABEL COMMAND...: runs it into $OUT/PART.log under the budget, then
# writes $OUT/PART.json.
run_part() {
  local part=$1 python_label=$2 left rc started ended begin smi
  shift 2
  # The device returns 8 files of $OUT: the parts that only prepare (bundle, torch-start) keep
  # theirs in $WORK and print their summary; torch-collect brings back its summary alone.
  local log_dir=$OUT json_dir=$OUT
  case $part in
    bundle | torch-start) log_dir=$WORK/parts json_dir=$WORK/parts ;;
    torch-collect) log_dir=$WORK/parts ;;
  esac
  mkdir -p "$log_dir" "$json_dir"
  local log="$log_dir/$part.log"
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  smi=$(if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi 2>&1; else echo "no nvidia-smi"; fi)
  left=$(remaining)
  begin=$SECONDS
  {
    echo "# $part ($python_label): $*"
    echo "# started $started, budget left ${left} s (0: none)${NEXT_PART:+; $(reserve_for "$NEXT_PART") s kept for $NEXT_PART}"
  } >"$log"
  if [ "$BUDGET" -gt 0 ] && [ "$left" -lt 60 ]; then
    echo "# skipped: ${left} s left of GPU_SUITE_BUDGET_S=$BUDGET" >>"$log"
    rc=skipped
  elif [ "$BUDGET" -gt 0 ] && ! declare -F "$1" >/dev/null; then
    timeout --preserve-status -s TERM -k 20 "$left" "$@" >>"$log" 2>&1
    rc=$?
  else
    "$@" >>"$log" 2>&1
    rc=$?
  fi
  local stopped=0
  [ "$BUDGET" -gt 0 ] && [ "$rc" != skipped ] && [ $((SECONDS - begin)) -ge "$left" ] && stopped=1
  ended=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "# ended $ended, exit $rc, $((SECONDS - begin)) s$([ $stopped = 1 ] && echo ", stopped at the budget")" >>"$log"
  if [ "$(stat -c %s "$log")" -gt 15000000 ]; then  # the device returns files of up to 16 MiB
    tail -c 12000000 "$log" >"$log.tail" && mv "$log.tail" "$log"
  fi
  PART="$part" RC="$rc" STARTED="$started" ENDED="$ended" SECONDS_TAKEN=$((SECONDS - begin)) \
    STOPPED="$stopped" COMMAND="$*" PYTHON_LABEL="$python_label" SMI="$smi" GPU_AFTER="$(gpu_state)" LOG="$log" \
    SMOKE="$SMOKE" RESULT_FILES="${RESULT_FILES:-}" \
    "${CLEAN_ENV[@]}" "$SUMMARY_PYTHON" - >"$json_dir/$part.json" <<'PY' || echo "$part: no summary written" >&2
import json, os, re, xml.etree.ElementTree as ET

part, rc, log = os.environ["PART"], os.environ["RC"], os.environ["LOG"]
files = [f for f in os.environ["RESULT_FILES"].split(":") if f]
text = open(log, errors="replace").read()


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def junit(path):
    """Counts, failures and the slowest tests of a pytest junit XML."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    counts["time_s"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    cases, failed = [], []
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        cases.append((float(case.get("time", 0)), name))
        for outcome in ("failure", "error"):
            for problem in case.findall(outcome):
                failed.append({"test": name, "outcome": outcome,
                               "message": (problem.get("message") or "")[:500],
                               "detail": (problem.text or "")[-1500:]})
    slowest = [{"test": name, "s": round(t, 1)} for t, name in sorted(cases, reverse=True)[:15]]
    return {**counts, "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": failed, "slowest": slowest}


result = None
if part in ("gpu-tests", "suite"):
    if files and os.path.exists(files[0]):
        result = junit(files[0])
    else:  # --collect-only, or stopped before pytest wrote the XML
        summary = [line for line in text.splitlines() if re.search(r"\d+ (tests? collected|passed|failed|error)", line)]
        result = {"summary_lines": summary[-5:]}
elif part == "train-step":
    result = load(files[0]) if files else None
    if result is None:  # stopped before train_step.py wrote its JSON: the rows it printed
        pattern = re.compile(r"^(\S+)\s+([\d.]+) ms\s+([\d,]+) tgt tok/s\s+([\d.]+) TFLOP/s\s+MFU ([\d.]+)% of (\w+) peak"
                             r"\s+XLA ran: (\w+)\s+warm-up ([\d.]+) s")
        rows = [dict(config=m[1], ms_per_step=float(m[2]), target_tokens_per_s=int(m[3].replace(",", "")),
                     model_tflops=float(m[4]), mfu=round(float(m[5]) / 100, 3), jit_compile=m[7] == "True",
                     warmup_s=float(m[8])) for m in map(pattern.match, text.splitlines()) if m]
        header = re.search(r"^device: (.*)$", text, re.M)
        result = {"from_log": True, "header": header and header[1], "rows": rows}
elif part in ("torch", "torch-collect"):
    result = load(files[0]) if files else None
    if result is None:  # failed or still running: why, from its log
        result = {"log_tail": text.splitlines()[-25:]}
elif part in ("recommended", "xla-matrix"):
    result = {os.path.basename(f): load(f) for f in files}
elif part == "trace":
    result = {"train_step": load(files[0]) if files else None,
              "trace_files": sorted(os.listdir(files[1])) if len(files) > 1 and os.path.isdir(files[1]) else []}
elif part == "torch-start":
    result = {"lines": text.splitlines()[-10:]}
elif part == "decode":
    result = load(files[0]) if files else None
    if result is None:  # the rows decode.py prints as it goes
        rows = []
        for line in text.splitlines():
            if line.startswith('{"model"'):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
        result = {"from_log": True, "rows": rows}
elif part == "recipe":
    logdir = files[0] if files else ""
    result = {"logdir": logdir, "metrics": load(os.path.join(logdir, "metrics.json")),
              "phases": load(os.path.join(logdir, "phases.json")),
              "lines": [line for line in text.splitlines()
                        if re.match(r"(train steps took|trained \d+ steps|model:|decoding|test |precision|xla|evaluation)",
                                    line, re.I)][-30:]}
elif part == "bundle":
    result = {"lines": text.splitlines()[-20:]}
elif part == "decide":
    result = load(files[0]) if files else None

if part == "bundle" and rc == "3":
    status = "incomplete: carry the missing parts in the next call"
elif rc == "skipped":
    status = "skipped: too little of the budget left"
elif os.environ["STOPPED"] == "1":
    status = ("stopped at the budget: saved, run the part again to resume" if rc == "75"
              else "stopped at the budget: partial results")
else:
    status = "ok" if rc == "0" else "failed"
print(json.dumps({
    "part": part, "status": status, "rc": rc, "stopped_at_budget": os.environ["STOPPED"] == "1", "smoke": os.environ["SMOKE"] == "1",
    "started_utc": os.environ["STARTED"], "ended_utc": os.environ["ENDED"],
    "seconds": int(os.environ["SECONDS_TAKEN"]), "command": os.environ["COMMAND"],
    "python": os.environ["PYTHON_LABEL"], "log": os.path.basename(log),
    "nvidia_smi": os.environ["SMI"], "gpu_after": os.environ["GPU_AFTER"], "result": result,
}, indent=1))
PY
  echo "$part: exit $rc in $((SECONDS - begin)) s -> $json_dir/$part.json, $log"
  if [ "$json_dir" != "$OUT" ]; then tail -c 3000 "$json_dir/$part.json"; echo; fi
}

pytest_part() {  # pytest_part PART MARK WORKERS
  local part=$1 mark=$2 workers=$3 xml="$WORK/$1.xml"
  tf_env
  rm -f "$xml"
  if [ "$SMOKE" = 1 ]; then
    RESULT_FILES="" run_part "$part" "$TF_PYTHON; $TF_FROM" \
      "$TF_PYTHON" -m pytest -m "$mark" -n 0 -p no:cacheprovider --collect-only -q
  else
    RESULT_FILES="$xml" run_part "$part" "$TF_PYTHON; $TF_FROM" \
      "$TF_PYTHON" -m pytest -m "$mark" -n "$workers" -p no:cacheprovider -q -rfE --junitxml="$xml"
  fi
}

part_gpu_tests() {
  pytest_part gpu-tests gpu "${GPU_TESTS_WORKERS:-4}"
}

part_suite() {
  # 12 workers x 2 logical GPUs x 3 GiB (conftest.py) = 72 GiB of an H100's 80.
  KSEQ_TEST_GPU_MEMORY_MB=${KSEQ_TEST_GPU_MEMORY_MB:-3072} \
    pytest_part suite "${SUITE_MARK:-not slow and not gpu}" "${SUITE_WORKERS:-12}"
}

step_args() {  # shared by train-step and torch: the same size, steps and warm-up
  if [ "$SMOKE" = 1 ]; then
    echo "--size tiny --steps 2 --warmup 1"
  else
    echo "--size ${TRAIN_STEP_SIZE:-base} --steps ${TRAIN_STEP_STEPS:-20} --warmup ${TRAIN_STEP_WARMUP:-5}"
  fi
}

part_train_step() {
  local result="$WORK/train-step.json" configs extra=()
  tf_env
  rm -f "$result"
  configs=kseq-bfloat16,kseq-float32,kseq-bfloat16-xla,kseq-float32-xla,hub-float32,hub-bfloat16-xla,hub-bfloat16,hub-float32-xla
  if [ "$SMOKE" = 1 ]; then
    configs=kseq-float32,hub-bfloat16-xla
    extra=(--peak-size 256)
  fi
  # shellcheck disable=SC2046
  RESULT_FILES="$result" run_part train-step "$TF_PYTHON; $TF_FROM" \
    "$TF_PYTHON" benchmarks/train_step.py $(step_args) --configs "${TRAIN_STEP_CONFIGS:-$configs}" \
    --config-timeout "${TRAIN_STEP_CONFIG_TIMEOUT:-150}" "${extra[@]}" --output "$result"
}

part_torch() {
  local result="$WORK/torch.json" extra=()
  rm -f "$result"
  [ -n "${TORCH_CONFIGS:-}" ] && extra+=(--configs "$TORCH_CONFIGS")
  if [ "$SMOKE" = 1 ]; then
    extra=(--configs "${TORCH_CONFIGS:-torch-float32,torch-bfloat16}" --peak-seconds 0.3 --threads 1)
  fi
  # shellcheck disable=SC2046
  RESULT_FILES="$result" run_part torch "$TORCH_PYTHON (PyTorch; bundle paths removed)" \
    "${CLEAN_ENV[@]}" "$TORCH_PYTHON" benchmarks/torch_transformer.py $(step_args) "${extra[@]}" --output "$result"
}

part_decode() {
  local result="$WORK/decode.json" args
  tf_env
  rm -f "$result"
  args=${DECODE_ARGS:-}
  [ "$SMOKE" = 1 ] && args=${DECODE_ARGS:---lengths 8 --repeats 1 --batch-size 4 --vocab-size 500}
  # shellcheck disable=SC2086
  RESULT_FILES="$result" run_part decode "$TF_PYTHON; $TF_FROM" \
    "$TF_PYTHON" benchmarks/decode.py $args --output "$result"
}

part_recipe() {
  local logdir="$WORK/runs/translate-gpu" exports="$WORK/savedmodels/translate-gpu" args minutes
  tf_env
  if [ "${RECIPE_FRESH:-0}" = 1 ]; then rm -rf "$logdir" "$exports"; fi
  minutes=${RECIPE_MINUTES:-5}
  args=${RECIPE_ARGS:-}
  if [ "$SMOKE" = 1 ]; then
    minutes=${RECIPE_MINUTES:-0.05}
    args=${RECIPE_ARGS:---num-layers 1 --d-model 32 --num-heads 2 --ff-dim 64 --embed-dim 32 --max-vocab-size 1000 --token-budget 2048 --eval-sentences 8 --tune-sentences 8 --max-test-sentences 8 --beam-size 1}
  fi
  # shellcheck disable=SC2086
  RESULT_FILES="$logdir" run_part recipe "$TF_PYTHON; $TF_FROM" \
    "$TF_PYTHON" -m kseq.cli.train translate --preset gpu --max-minutes "$minutes" --logdir "$logdir" \
    --export-dir "$exports" $args
}

torch_start() {  # runs inside run_part: PyTorch's rows in the background, outside the checkout
  local home=$1
  mkdir -p "$home" && cp benchmarks/torch_transformer.py "$home/" || return 1
  if [ -f "$home/pid" ] && kill -0 "$(cat "$home/pid")" 2>/dev/null; then
    echo "torch-start: already running (pid $(cat "$home/pid"))"; return 0
  fi
  rm -f "$home/torch.json" "$home/done"
  # shellcheck disable=SC2046
  setsid bash -c "$(printf '%q ' "${CLEAN_ENV[@]}" "$TORCH_PYTHON" "$home/torch_transformer.py" $(step_args) \
    "${@:2}" --output "$home/torch.json") >'$home/torch.log' 2>&1; echo \$? >'$home/done'" </dev/null &
  echo $! >"$home/pid"
  echo "torch-start: pid $(cat "$home/pid"), writing $home/torch.json"
}

torch_wait() {  # runs inside run_part: waits for torch_start's run, then shows its log's end
  local home=$1 waited=0 limit=$2
  [ -f "$home/pid" ] || { echo "torch-collect: no run started in $home"; return 3; }
  while [ ! -f "$home/done" ] && [ "$waited" -lt "$limit" ]; do sleep 5; waited=$((waited + 5)); done
  tail -n 40 "$home/torch.log"
  if [ ! -f "$home/done" ]; then echo "torch-collect: still running after ${limit} s; its rows so far"; return 4; fi
  return "$(cat "$home/done")"
}

part_torch_start() {
  local extra=()
  [ -n "${TORCH_CONFIGS:-}" ] && extra+=(--configs "$TORCH_CONFIGS")
  [ "$SMOKE" = 1 ] && extra=(--configs "${TORCH_CONFIGS:-torch-float32}" --peak-seconds 0.3 --threads 1)
  RESULT_FILES="" run_part torch-start "$TORCH_PYTHON (PyTorch, in the background)" \
    torch_start "${TORCH_HOME_RUN:-$HOME/kseq-torch}" "${extra[@]}"
}

part_torch_collect() {
  local home=${TORCH_HOME_RUN:-$HOME/kseq-torch}
  RESULT_FILES="$home/torch.json" run_part torch-collect "$TORCH_PYTHON (PyTorch)" torch_wait "$home" \
    "${TORCH_WAIT_S:-240}"
}

part_trace() {
  local result="$WORK/trace-step.json" traces="$WORK/trace-out" size
  tf_env
  rm -rf "$result" "$WORK/trace" "$traces" "$OUT/trace"
  size=$(step_args)
  # shellcheck disable=SC2046,SC2086
  RESULT_FILES="$result:$traces" run_part trace "$TF_PYTHON; $TF_FROM" \
    "$TF_PYTHON" benchmarks/train_step.py $size --configs "${TRACE_CONFIG:-kseq-bfloat16}" \
    --profile "$WORK/trace" --trace-out "$traces" --config-timeout "${TRAIN_STEP_CONFIG_TIMEOUT:-150}" \
    $([ "$SMOKE" = 1 ] && echo --peak-size 256) --output "$result"
  # Only the raw trace comes back beside trace.json (which holds the report): files count.
  mkdir -p "$OUT/trace" && cp "$traces"/*.xplane.pb.gz* "$OUT/trace/" 2>/dev/null
}

part_recommended() {  # each recommended config, then each with compiled blocks, in one train_step.py run
  local extra=() configs config both=""
  tf_env
  rm -f "$WORK/recommended-rows.json"
  [ "$SMOKE" = 1 ] && extra=(--peak-size 256)
  configs=${RECOMMENDED_CONFIGS:-kseq-bfloat16,kseq-float32}
  for config in ${configs//,/ }; do both+="${both:+,}$config"; done
  for config in ${configs//,/ }; do both+=",$config+compiled_blocks"; done
  # shellcheck disable=SC2046
  RESULT_FILES="$WORK/recommended-rows.json" run_part recommended "$TF_PYTHON; $TF_FROM" \
    "$TF_PYTHON" benchmarks/train_step.py $(step_args) --configs "$both" \
    --config-timeout "${TRAIN_STEP_CONFIG_TIMEOUT:-150}" "${extra[@]}" --output "$WORK/recommended-rows.json"
}

part_xla_matrix() {
  local result="$WORK/xla-matrix.json" left args
  tf_env
  rm -f "$result"
  left=$(($(remaining) - 20))
  if [ "$SMOKE" = 1 ]; then
    args=${XLA_MATRIX_ARGS:---size tiny --settings nojit,jit --setting-timeout 120}
  else
    args=${XLA_MATRIX_ARGS:---size base --precision bfloat16 --settings persistent-cache:300,jit-autotune0:150,nojit:60,jit-autotune-cache,jit-parallel-llvm,jit-kernel-cache,jit-no-triton-gemm,jit-autotune1,autojit,shared-block,jit --setting-timeout 240}
  fi
  # shellcheck disable=SC2086
  RESULT_FILES="$result" run_part xla-matrix "$TF_PYTHON; $TF_FROM" \
    "$TF_PYTHON" benchmarks/xla_compile.py --matrix $args --budget-s "$((left > 60 ? left : 60))" \
    --workdir "$WORK/xla-matrix" --output "$result"
}

# The decide part's rows after the default: compiled blocks under each compile setting, cheapest first
# (name:cache, a cache named twice is warm the second time), whole-step XLA last.
DECIDE_COMPILED=(+compiled_blocks+autotune_level=0:a +compiled_blocks:b +compiled_blocks+parallel_codegen=0:c
  +compiled_blocks+kernel_cache=1:e +compiled_blocks:b -xla:f)

decide_left() {  # seconds this part may still spend, less what its summary needs
  if [ "$BUDGET" -le 0 ]; then echo 100000; else echo $((BUDGET - SECONDS - 15)); fi
}

decide_rows() {  # runs inside run_part: every row of the decide part, under the budget
  local precision=bfloat16 steps="--steps ${DECIDE_STEPS:-10} --warmup ${DECIDE_WARMUP:-3}" size=base
  local cap=${DECIDE_CAP_S:-90} torch_configs=${TORCH_CONFIGS:-torch-bfloat16-compile,torch-bfloat16}
  local kseq_files=() entry config cache left number=0
  local compiled=("${DECIDE_COMPILED[@]}") extra=()
  if [ "$SMOKE" = 1 ]; then
    steps="--steps 2 --warmup 1" size=tiny precision=float32 extra=(--peak-size 256)
    compiled=(+compiled_blocks+autotune_level=0:a +compiled_blocks:a -xla:f)
  fi
  rm -rf "$WORK/decide" && mkdir -p "$WORK/decide"
  summarize() {
    "${CLEAN_ENV[@]}" "$SUMMARY_PYTHON" benchmarks/decide_summary.py --torch "$WORK/decide/torch.json" \
      --kseq "${kseq_files[@]}" --output "$OUT/decide-rows.json"
  }
  echo "## PyTorch ($torch_configs), in the foreground"
  # shellcheck disable=SC2086
  timeout -k 10 "$(( $(decide_left) < 150 ? $(decide_left) : 150 ))" "${CLEAN_ENV[@]}" "$TORCH_PYTHON" \
    benchmarks/torch_transformer.py --size $size $steps --clip global --configs "$torch_configs" \
    $([ "$SMOKE" = 1 ] && echo --peak-seconds 0.3 --threads 1) --output "$WORK/decide/torch.json"
  summarize
  echo "## kseq's default: kseq-$precision"
  kseq_files+=("$WORK/decide/default.json")
  # shellcheck disable=SC2086
  timeout -k 10 "$(decide_left)" "$TF_PYTHON" benchmarks/train_step.py --size $size $steps \
    --configs "kseq-$precision" --config-timeout 60 "${extra[@]}" --output "$WORK/decide/default.json"
  summarize
  for entry in "${compiled[@]}"; do
    config="kseq-$precision${entry%:*}" cache="$WORK/decide/cache-${entry##*:}" number=$((number + 1))
    left=$(decide_left)
    if [ "$left" -lt 40 ]; then echo "## $config: skipped, ${left} s left"; continue; fi
    echo "## $config (cache $cache), capped at $(( left < cap ? left : cap )) s"
    kseq_files+=("$WORK/decide/compiled-$number.json")
    # shellcheck disable=SC2086
    timeout -k 10 "$((left + 5))" "$TF_PYTHON" benchmarks/train_step.py --size $size $steps --configs "$config" \
      --config-timeout "$(( left < cap ? left : cap ))" --xla-cache "$cache" "${extra[@]}" \
      --output "$WORK/decide/compiled-$number.json"
    summarize
  done
}

part_decide() {
  tf_env
  RESULT_FILES="$OUT/decide-rows.json" run_part decide "$TF_PYTHON; $TF_FROM" decide_rows
}

bundle_gather() {  # runs inside run_part: gather carried parts, unpack once complete
  local src=$1 store=$2
  if [ -f "$BUNDLE/env.sh" ]; then echo "bundle: $BUNDLE/env.sh exists, nothing to do"; return 0; fi
  mkdir -p "$store"
  if [ -d "$src" ]; then cp -r "$src"/. "$store"/ && echo "bundle: copied $(find "$src" -type f | wc -l) files from $src"; fi
  echo "bundle: the store holds $(find "$store" -name 'part.*' | wc -l) parts ($(du -sh "$store" | cut -f1))"
  if [ ! -f "$store/SUMS" ] || [ ! -x "$store/zstd/zstd" ]; then echo "bundle: SUMS or zstd/ not there yet"; return 3; fi
  if ! (cd "$store" && sha256sum --quiet -c SUMS 2>&1); then echo "bundle: incomplete, carry the missing parts"; return 3; fi
  mkdir -p "$BUNDLE"
  cat "$store"/part*/part.* | LD_LIBRARY_PATH="$store/zstd" "$store/zstd/zstd" -d --long=30 | tar x -C "$BUNDLE" || return 1
  [ -f "$BUNDLE/env.sh" ] && echo "bundle: unpacked into $BUNDLE ($(du -sh "$BUNDLE" | cut -f1))"
}

part_bundle() {
  RESULT_FILES="" run_part bundle "bash" bundle_gather "${KSEQ_BUNDLE_SRC:-$ROOT/.gpu}" "${KSEQ_BUNDLE_STORE:-/root/k-parts}"
}

echo "gpu_suite: ${expanded[*]} -> $OUT (budget ${BUDGET} s; smoke $SMOKE; $(date -u +%FT%TZ))"
for index in "${!expanded[@]}"; do
  NEXT_PART=${expanded[index + 1]:-}
  "part_${expanded[index]//-/_}"
done
