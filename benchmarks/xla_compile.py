"""Why XLA takes minutes to compile the Transformer's train step: its size in
HLO before and after XLA's optimisation, where the compile time goes, and a
matrix of XLA settings for a GPU, each in its own process under a timeout.

HLO mode (the default; meant for a CPU): for each variant at `--size` (the
SIZES of train_step.py), in a fresh process per variant and repeat, the train
step keras compiles (the model's `train_step` inside `tf.function(jit_compile=
True)`, as keras 3.15's TensorFlow trainer builds `one_step_on_data`):
TensorFlow ops in its traced graph, XLA's compile seconds (the first call less
a step, and TensorFlow's own timer) split into TensorFlow-to-HLO, HLO passes
and code generation, the slowest HLO passes, the step time, and the HLO
instructions of `experimental_get_compiler_ir` at stage "hlo" and
"optimized_hlo" (computations and fusions of the optimised module, and which
TensorFlow op types the unoptimised instructions come from). Variants:

    kseq                      TransformerSeq2Seq (shared embeddings), kseq's loss, FusedAdam, one global clip
    hub                       KerasHub TransformerEncoder/Decoder layers, keras' Adam (train_step.py's build)
    plain                     the same math in TensorFlow ops, no keras (plain_transformer_step.py)
    plain-shared-block        plain, each stack's layers calling ONE jit-compiled block function that takes
                              the layer's weights; the step around them runs without XLA (compiled blocks
                              are reused: compilations are counted)
    plain-shared-block-in-jit the same block functions called inside a whole-step jit_compile function
                              (TensorFlow then compiles the step with the weights and inputs as
                              constants: once a call)
    kseq-compiled-blocks      kseq's step with `TransformerSeq2Seq(compiled_blocks=True)`: each stack's
                              blocks through one XLA-compiled function taking a block's weights; the
                              step around them uncompiled (compilations are counted)

`--steps 0` traces and reads the IR only, running no step (base size on a CPU:
one XLA step there allocates 17 GB). `--layers N` gives the size N layers a
stack (does a count follow depth?), `--batch N` N rows a batch (XLA's
compile time follows the graph, not the batch: base widths fit a CPU step
at a few rows).

Matrix mode (`--matrix`; meant for a GPU): each setting (`--settings`, see
SETTINGS; NAME:SECONDS gives one its own timeout) in its own process under
`--setting-timeout` seconds, the settings after `--budget-s` seconds
recorded as skipped; prints and rewrites
`--output` (JSON) after each: seconds to the first step, compile seconds, ms
a step over `--steps` steps, whether XLA ran and how often it compiled, and
from TensorFlow's and XLA's logs the compile's phases and slowest passes,
also for a setting stopped midway. Settings with a cache run twice (the
second run's time is the point).

    .venv/bin/python benchmarks/xla_compile.py --size deep-tiny --repeats 2
    .venv/bin/python benchmarks/xla_compile.py --size quick --variants kseq,plain --output /tmp/hlo.json
    .venv/bin/python benchmarks/xla_compile.py --matrix --size deep-tiny --setting-timeout 120 --budget-s 900
    python3 benchmarks/xla_compile.py --matrix --size base --settings persistent-cache:300,jit-autotune0:150,\\
        nojit:60,jit-autotune-cache,jit-parallel-llvm,jit-kernel-cache,jit-no-triton-gemm,jit-autotune1,\\
        autojit,shared-block,jit --setting-timeout 240 --budget-s 420 --output $OUT/xla-matrix-base.json  # GPU

kseq is imported from PYTHONPATH where set (e.g. a worktree of an older
commit), else from the installed package: the output names `kseq_file`.
"""

import argparse
import collections
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

START = time.perf_counter()  # a child's "seconds to the first step" count from here
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # plain_transformer_step.py

VARIANTS = ("kseq", "hub", "plain", "plain-shared-block", "plain-shared-block-in-jit", "kseq-compiled-blocks")
# Variants whose step is not compiled whole: their XLA modules are counted from a dump.
DUMPED = ("plain-shared-block", "kseq-compiled-blocks")
MODELS = ("kseq", "hub", "plain")
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# TensorFlow's and XLA's timers and markers: which modules log them at level 1.
VMODULE = "device_compiler=1,xla_compiler=1,hlo_pass_pipeline=1,cpu_compiler=1,gpu_compiler=1,nvptx_compiler=1"
# Every flag here was checked against TensorFlow 2.21's XLA (an unknown one aborts the process).
SETTINGS = {
    "nojit": dict(jit="off"),
    "jit": dict(jit="on"),
    "jit-autotune0": dict(jit="on", xla_flags=["--xla_gpu_autotune_level=0"]),
    "jit-autotune1": dict(jit="on", xla_flags=["--xla_gpu_autotune_level=1"]),
    "jit-no-triton-gemm": dict(jit="on", xla_flags=["--xla_gpu_enable_triton_gemm=false"]),
    "jit-parallel-llvm": dict(jit="on", xla_flags=["--xla_gpu_enable_llvm_module_compilation_parallelism=true",
                                                   "--xla_gpu_force_compilation_parallelism={cores}"]),
    "jit-autotune-cache": dict(jit="on", xla_flags=["--xla_gpu_per_fusion_autotune_cache_dir={cache}"], runs=2),
    "jit-kernel-cache": dict(jit="on", xla_flags=["--xla_gpu_kernel_cache_file={cache}/kernels"], runs=2),
    "persistent-cache": dict(jit="on", persistent_cache=True, runs=2),
    # TensorFlow auto-clusters for GPUs only, unless told to on a CPU too.
    "autojit": dict(jit="off", tf_xla_flags=["--tf_xla_auto_jit=2"], cpu_tf_xla_flags=["--tf_xla_cpu_global_jit"]),
    "shared-block": dict(jit="shared-block"),
}
# Most telling first. persistent-cache's first run is the default compile (with
# its passes' timers) and fills the cache; its second run is the cache's answer.
# Then whether autotuning is the compile's bulk, the step without XLA, the other
# caches and flags; "jit" repeats persistent-cache's first run without the cache.
DEFAULT_SETTINGS = ("persistent-cache", "jit-autotune0", "nojit", "jit-autotune-cache", "jit-parallel-llvm",
                    "jit-kernel-cache", "jit-no-triton-gemm", "jit-autotune1", "autojit", "shared-block", "jit")
IR_MARKER = "XLA_COMPILE_BENCH compiler IR"


def load_train_step():
    """benchmarks/train_step.py imported by path, for its SIZES and `build`,
    leaving sys.path as it was (it puts the checkout first, which would
    shadow a kseq on PYTHONPATH)."""
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("train_step", os.path.join(HERE, "train_step.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path[:] = saved
    return module


SIZES = load_train_step().SIZES


def random_batch(size, seed=0):
    """({"source_ids", "target_ids"}, labels) of random ids >= 4 at the
    size's fixed shapes, drawn as train_step.py draws them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batch = {"source_ids": rng.integers(4, size["vocab"], (size["batch"], size["source"]), dtype="int32"),
             "target_ids": rng.integers(4, size["vocab"], (size["batch"], size["target"]), dtype="int32")}
    return batch, rng.integers(4, size["vocab"], (size["batch"], size["target"]), dtype="int32")


# ---------------------------------------------------------------- reading HLO and logs

HLO_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][\w\-]*)\(")


def hlo_stats(text):
    """Counts in an HLO module's text.

    Args:
        text: `experimental_get_compiler_ir(...)(stage=...)` output or an XLA dump.

    Returns:
        {"instructions", "computations", "fusions" (instructions of opcode
        fusion), "entry_instructions"}.
    """
    counts = collections.Counter()
    in_entry = False
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{") and not line.startswith("HloModule"):
            counts["computations"] += 1
            in_entry = line.startswith("ENTRY")
            continue
        match = HLO_INSTRUCTION.match(line)
        if match:
            counts["instructions"] += 1
            counts["fusions"] += match.group(1) == "fusion"
            counts["entry_instructions"] += in_entry
    return {key: counts[key] for key in ("instructions", "computations", "fusions", "entry_instructions")}


def hlo_by_op_type(text, top=10):
    """[(TensorFlow op type, HLO instructions)] of an unoptimised module,
    the most first: which ops the HLO comes from (its metadata's op_type)."""
    counts = collections.Counter()
    for line in text.splitlines():
        if HLO_INSTRUCTION.match(line):
            found = re.search(r'op_type="([^"]+)"', line)
            counts[found.group(1) if found else "(none)"] += 1
    return counts.most_common(top)


LOG_LINE = re.compile(r"^[IWEF]\d{4} (\d+):(\d+):([\d.]+)\s+\d+ ([\w.]+):\d+\] (.*)$")
TIMER = re.compile(r"^(.*?) time: [^(]*\((\d+) us\)")


def parse_xla_log(text):
    """What TensorFlow's and XLA's level-1 logs (VMODULE) say about compiling.

    Args:
        text: a process's stderr, from start to end or to where it was stopped.

    Returns:
        {"xla_ran": a cluster was compiled ("Compiled cluster using XLA"),
        "xla_compilations", "xla_compile_s": TensorFlow's timer per
        compilation, "phases" of the first compilation (tf_to_hlo_s,
        hlo_passes_s, codegen_s: after the last HLO pass; one still
        running: the last pass that ended and the seconds since; one that
        ran no HLO pass, i.e. loaded from the persistent cache:
        loaded_without_hlo_passes), "slowest_passes" [(pass or pipeline,
        s, calls)], "timers" [(other timer, s, calls)]}.
    """
    compilations = []
    passes, timers = collections.defaultdict(lambda: [0.0, 0]), collections.defaultdict(lambda: [0.0, 0])
    ran = False
    first_function = first_pass_start = last_pass = last_pass_name = compiled = last_stamp = None
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if not match:
            continue
        last_stamp = stamp = int(match.group(1)) * 3600 + int(match.group(2)) * 60 + float(match.group(3))
        message = match.group(5)
        ran |= "Compiled cluster using XLA" in message
        if first_function is None and "XlaCompiler::CompileFunction" in message:
            first_function = stamp
        timer = TIMER.match(message)
        if not timer:
            continue
        label, seconds = re.sub(r"\[[^\]]*\]", "[...]", timer.group(1)), int(timer.group(2)) / 1e6
        table = passes if label.startswith("HLO pass: ") else timers
        if label == "Compilation of XLA executable":
            compilations.append(round(seconds, 2))
            compiled = compiled or stamp
        elif "LLVM verifier" not in label:
            name = label.removeprefix("HLO pass: ")
            table[name][0] += seconds
            table[name][1] += 1
            if table is passes and compiled is None:
                first_pass_start = first_pass_start or stamp - seconds
                last_pass, last_pass_name = stamp, name
    phases = {}
    if first_function is not None and first_pass_start is not None:
        phases["tf_to_hlo_s"] = round(first_pass_start - first_function, 2)
    if first_pass_start is not None:
        phases["hlo_passes_s"] = round(last_pass - first_pass_start, 2)
        if compiled is not None:
            phases["codegen_s"] = round(compiled - last_pass, 2)
        else:
            phases.update(last_pass=last_pass_name, since_last_pass_s=round(last_stamp - last_pass, 2))
    elif compiled is not None:
        phases["loaded_without_hlo_passes"] = True

    def top(table, count):
        rows = sorted(table.items(), key=lambda item: -item[1][0])[:count]
        return [(name, round(seconds, 2), calls) for name, (seconds, calls) in rows]

    return dict(xla_ran=ran or bool(compilations), xla_compilations=len(compilations), xla_compile_s=compilations,
                phases=phases, slowest_passes=top(passes, 8), timers=top(timers, 8))


def dumped_modules(folder):
    """[{"module", "before", "after"}] of the HLO text XLA dumped in `folder`
    (`--xla_dump_to --xla_dump_hlo_as_text`), one entry a compiled module."""
    modules = collections.defaultdict(dict)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        stage = ("before" if name.endswith(".before_optimizations.txt")
                 else "after" if name.endswith("after_optimizations.txt") else None)
        if stage:
            with open(os.path.join(folder, name)) as f:
                modules[name.split(".")[0] + "." + name.split(".")[1]][stage] = hlo_stats(f.read())
    return [dict(module=module, **stages) for module, stages in modules.items()]


# ---------------------------------------------------------------- the steps

def keras_step(model_name, size, precision, jit, compiled_blocks=False):
    """The train step keras compiles for train_step.py's `model_name` model.

    Args:
        model_name: "kseq" or "hub".
        size: a SIZES entry.
        precision: a PRECISIONS key.
        jit: whether the step is compiled with XLA (keras' `jit_compile`).
        compiled_blocks: kseq's model with its blocks compiled. Default False.

    Returns:
        (the step's tf.function, its arguments), as keras 3.15's TensorFlow
        trainer builds `one_step_on_data`: the model's `train_step` under
        its strategy's `run`, its outputs reduced over the replicas.
    """
    import keras
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer as keras_trainer

    import kseq
    from kseq.training.devices.distribution import clip_after_all_reduce

    keras.utils.set_random_seed(0)
    model = load_train_step().build(model_name, size, PRECISIONS[precision], compiled_blocks)
    adam = kseq.optimizers.FusedAdam if model_name == "kseq" else keras.optimizers.Adam
    optimizer = adam(kseq.schedules.TransformerSchedule(size["d"], 4000), beta_2=0.98, epsilon=1e-9,
                     global_clipnorm=1.0)
    model.compile(clip_after_all_reduce(optimizer),
                  kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1), jit_compile=jit)
    batch, labels = random_batch(size)
    data = ({name: tf.constant(ids) for name, ids in batch.items()}, tf.constant(labels))
    model._symbolic_build(data_batch=data)  # what fit does before its first step

    def one_step_on_data(data):
        outputs = model.distribute_strategy.run(model.train_step, args=(data,))
        return keras_trainer.reduce_per_replica(outputs, model.distribute_strategy, reduction="auto")

    step = tf.function(one_step_on_data, reduce_retracing=True, jit_compile=bool(model.jit_compile))
    return step, (data,)


def plain_step(variant, size, jit=True):
    """(the plain step's tf.function, its arguments) for a plain* variant;
    `jit` compiles the whole step (plain-shared-block never does)."""
    import tensorflow as tf

    from plain_transformer_step import PlainTransformerStep

    model = PlainTransformerStep(size, shared_blocks=variant != "plain")
    batch, labels = random_batch(size)
    whole_step_jit = jit and variant != "plain-shared-block"
    step = tf.function(model.train_step, jit_compile=whole_step_jit)
    return step, (tf.constant(batch["source_ids"]), tf.constant(batch["target_ids"]), tf.constant(labels))


def make_step(variant, size, precision="float32", jit=True):
    """(tf.function, arguments) of `variant`'s train step (VARIANTS)."""
    if variant in ("kseq", "hub"):
        return keras_step(variant, size, precision, jit)
    if variant == "kseq-compiled-blocks":
        return keras_step("kseq", size, precision, jit=False, compiled_blocks=True)
    if precision != "float32":
        raise ValueError(f"--precision: the plain variants run float32 only, got {precision!r}")
    return plain_step(variant, size, jit)


def loss_of(outputs):
    """A step's loss as a float (waits for the step)."""
    return float(outputs["loss"] if isinstance(outputs, dict) else outputs)


def trace_counts(step, args):
    """Traces `step`: {"trace_s", "graph_ops" (its graph's nodes),
    "graph_functions", "function_ops" (nodes in the functions it calls)}."""
    start = time.perf_counter()
    graph = step.get_concrete_function(*args).graph.as_graph_def()
    return dict(trace_s=round(time.perf_counter() - start, 2), graph_ops=len(graph.node),
                graph_functions=len(graph.library.function),
                function_ops=sum(len(function.node_def) for function in graph.library.function))


def trace_and_time(step, args, steps, untimed=0):
    """Traces `step`, calls it once (XLA compiles there; a FIRST_STEP line
    says when it ended), `untimed` more times, then times `steps` calls.

    Returns:
        The traced graph's op counts (its own, and inside the functions it
        calls), trace and first-call seconds (wall and CPU), seconds from
        the process's start to the first step's end, ms a step, and the
        compile seconds: the first call less a step.
    """
    result = trace_counts(step, args)
    start, cpu = time.perf_counter(), time.process_time()
    first_loss = loss_of(step(*args))
    result.update(first_call_s=round(time.perf_counter() - start, 2),
                  first_call_cpu_s=round(time.process_time() - cpu, 2), first_loss=round(first_loss, 4),
                  first_step_s=round(time.perf_counter() - START, 2))
    print("FIRST_STEP " + json.dumps(result), flush=True)
    for _ in range(untimed):
        loss_of(step(*args))
    start = time.perf_counter()
    for _ in range(steps):
        outputs = step(*args)
    loss = loss_of(outputs)
    seconds = (time.perf_counter() - start) / steps
    result.update(step_ms=round(1000 * seconds, 2), loss=round(loss, 4),
                  compile_s=round(result["first_call_s"] - seconds, 2))
    return result


def measure_variant(variant, size, steps, compiler_ir=True):
    """One variant's HLO mode row, measured in this process: see the module
    docstring; `steps` 0 traces and reads the compiler's IR only, without
    running a step (where one step would not fit in memory). Returns a dict."""
    import tensorflow as tf

    step, args = make_step(variant, size)
    measured = trace_and_time(step, args, steps) if steps else trace_counts(step, args)
    result = dict(variant=variant, **measured)
    if compiler_ir and variant not in DUMPED:
        print(IR_MARKER, file=sys.stderr, flush=True)  # the log after it is the IR stages' own compile
        ir = step.experimental_get_compiler_ir(*args)
        for stage in ("hlo", "optimized_hlo"):
            start = time.perf_counter()
            text = ir(stage=stage)
            result[f"{stage}_s"] = round(time.perf_counter() - start, 2)
            result[stage] = hlo_stats(text)
            if stage == "hlo":
                result["hlo_by_op_type"] = hlo_by_op_type(text)
    result["tensorflow"] = tf.__version__
    return result


def measure_setting(setting, model, size, precision, steps, cache_dir=None):
    """One matrix setting's run, in this process: seconds to the first step
    (from the process's start), the first call, ms a step. Returns a dict."""
    if SETTINGS[setting].get("persistent_cache"):
        from kseq.training.devices.xla import enable_persistent_cache

        enable_persistent_cache(cache_dir)  # before TensorFlow sets up its devices
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    jit = SETTINGS[setting]["jit"]
    variant = "plain-shared-block" if jit == "shared-block" else model
    step, args = make_step(variant, size, precision, jit != "off")
    if model != "plain" or jit == "shared-block":
        try:  # as the recipes do before a compiled step's first trace: the cache finds it by name
            from kseq._compat import align_function_names

            align_function_names()
        except ImportError:
            pass
    # Two untimed steps after the first: allocator growth is not the step's.
    result = trace_and_time(step, args, steps, untimed=2)
    device = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else "CPU"
    return dict(setting=setting, model=variant, precision=precision, device=device, gpu=bool(gpus), **result)


# ---------------------------------------------------------------- processes and bookkeeping

def run_child(argv, env, timeout, log_path):
    """Runs `argv` in its own session, stdout and stderr to `log_path`.out
    and .err, killing its whole process group after `timeout` seconds.

    Returns:
        {"status": "ok" | "timeout" | "failed", "seconds", "returncode",
        "result" (its last RESULT line, parsed), "first_step" (its
        FIRST_STEP line), "stdout", "stderr" (paths)}.
    """
    start = time.monotonic()
    with open(log_path + ".out", "w") as out, open(log_path + ".err", "w") as err:
        process = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout)
            status = "ok" if returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended in between
                pass
            returncode, status = process.wait(), "timeout"
    found = {}
    with open(log_path + ".out") as f:
        for line in f:
            for tag in ("RESULT", "FIRST_STEP"):
                if line.startswith(tag + " "):
                    found[tag] = json.loads(line[len(tag) + 1:])
    if status == "ok" and "RESULT" not in found:
        status = "failed"
    return dict(status=status, seconds=round(time.monotonic() - start, 1), returncode=returncode,
                result=found.get("RESULT"), first_step=found.get("FIRST_STEP"),
                stdout=log_path + ".out", stderr=log_path + ".err")


def tail(path, lines=15):
    """The last `lines` lines of a file that are not TensorFlow's info logs."""
    with open(path, errors="replace") as f:
        kept = [line.rstrip() for line in f if not re.match(r"I\d{4} ", line)]
    return kept[-lines:]


def run_matrix(plan, setting_timeout, budget_s, output=None, meta=None, on_row=print, minimum_s=5.0):
    """Runs each setting's runs under its timeout, until `budget_s` seconds
    have gone: later runs are recorded as skipped, as are a setting's later
    runs once one did not finish (a cache it did not fill has nothing to give).

    Args:
        plan: [{"name", "runs": [{"argv", "env", "log"}], "notes", "timeout"
            (optional, else `setting_timeout`)}], in order.
        setting_timeout: seconds a run may take.
        budget_s: seconds for all; a run gets at most what is left, and none
            with less than `minimum_s` left.
        output: JSON path rewritten after each setting (None: not written).
        meta: fields written beside the rows.
        on_row: called with each row's one-line summary.

    Returns:
        {**meta, "rows": [{"setting", "status", "runs": [...], "notes"}]}.
    """
    started = time.monotonic()
    record = dict(meta or {}, budget_s=budget_s, setting_timeout_s=setting_timeout, rows=[])

    def write():
        if output:
            write_json(output, record)

    for entry in plan:
        row = dict(setting=entry["name"], runs=[], notes=list(entry.get("notes", ())))
        for run in entry["runs"]:
            left = budget_s - (time.monotonic() - started)
            if row["runs"] and row["runs"][-1]["status"] != "ok":
                row["runs"].append(dict(status="skipped", reason="the run before did not finish"))
                continue
            if left < minimum_s:
                row["runs"].append(dict(status="skipped", reason=f"{budget_s:g} s budget spent"))
                continue
            timeout = min(entry.get("timeout") or setting_timeout, left)
            done = run_child(run["argv"], run["env"], timeout, run["log"])
            done["timeout_s"] = round(timeout, 1)
            with open(done["stderr"], errors="replace") as f:
                done["xla"] = parse_xla_log(f.read())
            if done["status"] != "ok":
                done["log_tail"] = tail(done["stderr"])
            row["runs"].append(done)
        statuses = [run["status"] for run in row["runs"]]
        row["status"] = next((s for s in statuses if s != "ok"), "ok")
        record["rows"].append(row)
        on_row(summary(row))
        write()
    record["seconds"] = round(time.monotonic() - started, 1)
    write()
    return record


def summary(row):
    """One line for a matrix row: each run's first step, compile, step time, XLA."""
    parts = []
    for number, run in enumerate(row["runs"], 1):
        if run["status"] == "skipped":
            parts.append(f"run {number}: skipped ({run['reason']})")
            continue
        result = run.get("result") or run.get("first_step") or {}
        xla = run.get("xla", {})
        parts.append(
            f"run {number}: {run['status']} in {run['seconds']} s; first step at {result.get('first_step_s', '-')} s, "
            f"compile {result.get('compile_s', '-')} s, {result.get('step_ms', '-')} ms/step; XLA ran "
            f"{xla.get('xla_ran', '-')} ({xla.get('xla_compilations', 0)} compilations, phases "
            f"{xla.get('phases', {})})")
    return f"{row['setting']:20s} " + "; ".join(parts) + "".join(f"\n    note: {n}" for n in row["notes"])


def child_env(xla_flags=(), tf_xla_flags=()):
    """The environment of a child: TensorFlow's info logs on, the compile's
    timers (VMODULE) on, and the given XLA_FLAGS and TF_XLA_FLAGS added."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE=VMODULE)
    for name, flags in (("XLA_FLAGS", xla_flags), ("TF_XLA_FLAGS", tf_xla_flags)):
        if flags:
            env[name] = " ".join([env.get(name, "")] + list(flags)).strip()
    return env


def matrix_plan(args, workdir, gpu):
    """The runs of each setting in `args.settings`, with their commands and notes."""
    plan = []
    for name, timeout in args.settings:
        setting = SETTINGS[name]
        cache = os.path.join(workdir, f"{name}-cache")
        os.makedirs(cache, exist_ok=True)  # XLA's autotune cache needs the folder to exist
        fill = dict(cache=cache, cores=os.cpu_count() or 1)
        xla_flags = [flag.format(**fill) for flag in setting.get("xla_flags", ())]
        notes, tf_xla_flags = [], list(setting.get("tf_xla_flags", ()))
        if not gpu and any(flag.startswith("--xla_gpu") for flag in xla_flags):
            notes.append("GPU-only XLA flags: XLA accepts them on a CPU and they change nothing there")
        if not gpu and setting.get("cpu_tf_xla_flags"):
            tf_xla_flags += setting["cpu_tf_xla_flags"]
            notes.append(f"no GPU: {' '.join(setting['cpu_tf_xla_flags'])} added")
        runs = []
        for number in range(1, setting.get("runs", 1) + 1):
            argv = [sys.executable, os.path.abspath(__file__), "--child-setting", name, "--model", args.model,
                    "--size", args.size, "--precision", args.precision, "--steps", str(args.steps or 10),
                    "--cache-dir", cache]
            runs.append(dict(argv=argv, env=child_env(xla_flags, tf_xla_flags),
                             log=os.path.join(workdir, f"{name}-run{number}")))
        plan.append(dict(name=name, runs=runs, notes=notes, timeout=timeout))
    return plan


def kseq_origin():
    """Where kseq comes from: its file, and the commit of its checkout where it is one."""
    spec = importlib.util.find_spec("kseq")
    path = spec.origin if spec else None
    origin = dict(kseq_file=path)
    if path:
        folder = os.path.dirname(os.path.dirname(path))
        found = subprocess.run(["git", "-C", folder, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        if found.returncode == 0:
            dirty = subprocess.run(["git", "-C", folder, "status", "--porcelain", "kseq"], capture_output=True,
                                   text=True).stdout.strip()
            origin.update(kseq_commit=found.stdout.strip(), kseq_uncommitted_changes=bool(dirty))
    return origin


def machine():
    """{"cpu", "cores", "load"}: what the CPU timings ran on and beside."""
    return dict(cpu=platform.processor() or platform.machine(), cores=os.cpu_count(),
                load=[round(load, 2) for load in os.getloadavg()])


# ---------------------------------------------------------------- HLO mode

def run_variants(args, workdir):
    """HLO mode: each variant x repeat in a fresh process; the rows with
    compile timings as min-max over the repeats."""
    rows = []
    for variant in args.variants:
        runs = []
        for repeat in range(args.repeats):
            load_before = os.getloadavg()[0]
            argv = [sys.executable, os.path.abspath(__file__), "--child-variant", variant, "--size", args.size]
            argv += ["--layers", str(args.layers)] if args.layers else []
            argv += ["--batch", str(args.batch)] if args.batch else []
            argv += (["--steps", str(args.steps)] if args.steps is not None else []) + (
                [] if repeat == 0 and args.compiler_ir else ["--no-compiler-ir"])
            dump = os.path.join(workdir, f"{variant}-{repeat}-dump")
            # Dumps only where several modules are compiled: dumping a whole step writes a file a kernel.
            xla_flags = [f"--xla_dump_to={dump}", "--xla_dump_hlo_as_text"] if variant in DUMPED else []
            done = run_child(argv, child_env(xla_flags), args.variant_timeout,
                             os.path.join(workdir, f"{variant}-{repeat}"))
            with open(done["stderr"], errors="replace") as f:
                log = f.read()
            done["xla"] = parse_xla_log(log.split(IR_MARKER)[0])
            done["load_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            if xla_flags:
                done["dumped_modules"] = dumped_modules(dump)
                shutil.rmtree(dump, ignore_errors=True)
            if done["status"] != "ok":
                done["log_tail"] = tail(done["stderr"])
            runs.append(done)
            print(f"  {variant} repeat {repeat + 1}: {done['status']} in {done['seconds']} s "
                  f"(load {done['load_1min']})", flush=True)
            if done["status"] != "ok":
                break
        rows.append(variant_row(variant, runs))
        print(variant_line(rows[-1]), flush=True)
        write_json(args.output, dict(mode="hlo", size=args.size, shapes=resized(args), **kseq_origin(),
                                     **machine(), rows=rows))
    return rows


def variant_row(variant, runs):
    """A variant's row: the first run's counts, timings' min and max over the runs."""
    done = [run for run in runs if run["status"] == "ok"]
    row = dict(variant=variant, status="ok" if len(done) == len(runs) else runs[-1]["status"],
               repeats=len(done), runs=runs)
    if not done:
        partial = runs[-1].get("first_step") or {}
        row.update(partial=partial, xla=runs[-1].get("xla"))
        return row
    first = done[0]["result"]
    for key in ("graph_ops", "graph_functions", "function_ops", "hlo", "optimized_hlo", "hlo_by_op_type",
                "hlo_s", "optimized_hlo_s"):
        if key in first:
            row[key] = first[key]
    for key in ("trace_s", "first_call_s", "first_call_cpu_s", "compile_s", "step_ms"):
        values = [run["result"][key] for run in done if key in run["result"]]
        row[key] = [min(values), max(values)] if values else None
    compiles = [sum(run["xla"]["xla_compile_s"]) for run in done]
    row["xla_compile_s"] = [round(min(compiles), 2), round(max(compiles), 2)]
    row["xla_compilations"] = done[0]["xla"]["xla_compilations"]
    row["phases"] = done[0]["xla"]["phases"]
    row["slowest_passes"] = done[0]["xla"]["slowest_passes"][:5]
    if "dumped_modules" in done[0]:
        modules = done[0]["dumped_modules"]
        row["dumped_modules"] = len(modules)
        for stage in ("before", "after"):
            row[f"dumped_{stage}_instructions"] = sum(m.get(stage, {}).get("instructions", 0) for m in modules)
        row["dumped_fusions"] = sum(m.get("after", {}).get("fusions", 0) for m in modules)
    return row


def variant_line(row):
    """A variant's row as one printed line."""
    if row["status"] != "ok":
        return f"{row['variant']:26s} {row['status']}: {row.get('partial')} {row.get('xla', {}).get('phases')}"
    hlo, optimized = row.get("hlo", {}), row.get("optimized_hlo", {})
    dumped = (f" dumped {row['dumped_modules']} modules: {row['dumped_before_instructions']} -> "
              f"{row['dumped_after_instructions']} instructions, {row['dumped_fusions']} fusions"
              if "dumped_modules" in row else "")
    return (f"{row['variant']:26s} graph ops {row['graph_ops']} (+{row['function_ops']} in functions); HLO "
            f"{hlo.get('instructions', '-')} -> {optimized.get('instructions', '-')} instructions, "
            f"{optimized.get('fusions', '-')} fusions, {optimized.get('computations', '-')} computations; "
            f"compile {row['compile_s']} s ({row['first_call_cpu_s']} CPU s in the first call; XLA's timer {row['xla_compile_s']} s, {row['xla_compilations']} "
            f"compilations; {row['phases']}); step {row['step_ms']} ms{dumped}; IR stages hlo "
            f"{row.get('hlo_s', '-')} s, optimized_hlo {row.get('optimized_hlo_s', '-')} s")


def write_json(path, record):
    """`record` to `path` (if any), whole or not at all."""
    if not path:
        return
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=2)
    os.replace(path + ".tmp", path)


def resized(args):
    """`--size`'s shapes with `--layers` and `--batch` where given."""
    overrides = {key: value for key, value in (("layers", args.layers), ("batch", args.batch)) if value}
    return dict(SIZES[args.size], **overrides)


def names(text, allowed, option):
    """A comma-separated list of names, each one of `allowed`."""
    chosen = [name for name in text.split(",") if name]
    unknown = [name for name in chosen if name not in allowed]
    if unknown or not chosen:
        raise SystemExit(f"{option}: expected names from {', '.join(allowed)}; got {text!r}")
    return chosen


def settings_with_timeouts(text):
    """[(setting, seconds or None)] from "name[:seconds],...": a setting's
    own timeout for each of its runs, else --setting-timeout's."""
    pairs = [item.partition(":") for item in text.split(",") if item]
    chosen = names(",".join(name for name, _, _ in pairs), tuple(SETTINGS), "--settings")
    timeouts = []
    for name, _, seconds in pairs:
        try:
            timeouts.append(float(seconds) if seconds else None)
        except ValueError:
            raise SystemExit(f"--settings: expected NAME or NAME:SECONDS, got {name}:{seconds}") from None
    return list(zip(chosen, timeouts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--size", choices=sorted(SIZES), default="deep-tiny")
    parser.add_argument("--variants", default="kseq,hub,plain,plain-shared-block",
                        help=f"HLO mode: some of {', '.join(VARIANTS)}")
    parser.add_argument("--repeats", type=int, default=2, help="HLO mode: processes a variant (compile min-max)")
    parser.add_argument("--layers", type=int, help="HLO mode: layers a stack, in place of the size's")
    parser.add_argument("--batch", type=int, help="HLO mode: rows a batch, in place of the size's")
    parser.add_argument("--steps", type=int, help="steps timed after the first (HLO mode 3, matrix 10); "
                                                  "HLO mode 0: no step run, the compiler's IR only")
    parser.add_argument("--no-compiler-ir", dest="compiler_ir", action="store_false",
                        help="HLO mode: skip experimental_get_compiler_ir (a second compile of the step)")
    parser.add_argument("--variant-timeout", type=float, default=900, help="HLO mode: seconds a process may take")
    parser.add_argument("--matrix", action="store_true", help="run the settings matrix (for a GPU)")
    parser.add_argument("--settings", default=",".join(DEFAULT_SETTINGS),
                        help="matrix: NAME[:SECONDS],... in this order (SECONDS: that setting's timeout a run)")
    parser.add_argument("--model", choices=MODELS, default="kseq", help="matrix: the model")
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="float32",
                        help="matrix: float32 (TF32 on a GPU) or keras' mixed policy")
    parser.add_argument("--setting-timeout", type=float, default=300, help="matrix: seconds a run may take")
    parser.add_argument("--budget-s", type=float, default=420, help="matrix: seconds for all settings")
    parser.add_argument("--workdir", help="children's logs and caches (default: a new temporary folder)")
    parser.add_argument("--output", help="JSON results, rewritten after each variant or setting")
    parser.add_argument("--child-variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--child-setting", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1 or (args.steps is not None and args.steps < 0):
        raise SystemExit("--repeats: expected a positive count; --steps: 0 or more")
    size = resized(args)
    if args.child_variant:
        steps = args.steps if args.steps is not None else 2 if args.child_variant.endswith("in-jit") else 3
        print("RESULT " + json.dumps(measure_variant(args.child_variant, size, steps, args.compiler_ir)), flush=True)
        return
    if args.child_setting:
        result = measure_setting(args.child_setting, args.model, size, args.precision, args.steps or 10,
                                 args.cache_dir)
        print("RESULT " + json.dumps(result), flush=True)
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="xla_compile_")
    os.makedirs(workdir, exist_ok=True)
    print(f"logs in {workdir}; {machine()}; {kseq_origin()}", flush=True)
    if not args.matrix:
        args.variants = names(args.variants, VARIANTS, "--variants")
        run_variants(args, workdir)
        return
    args.settings = settings_with_timeouts(args.settings)
    gpu = shutil.which("nvidia-smi") is not None
    meta = dict(mode="matrix", size=args.size, shapes=size, model=args.model, precision=args.precision,
                settings=[f"{name}:{seconds or args.setting_timeout:g}" for name, seconds in args.settings],
                gpu_visible=gpu, date=time.strftime("%Y-%m-%d"), **kseq_origin(), **machine())
    run_matrix(matrix_plan(args, workdir, gpu), args.setting_timeout, args.budget_s, args.output, meta,
               on_row=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
