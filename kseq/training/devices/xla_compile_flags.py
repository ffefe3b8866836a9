"""How XLA compiles on a GPU: parallel code generation and the autotune caches.

TensorFlow gives XLA no thread pool, so its GPU code generation runs on one
thread unless two flags split the LLVM module and name the threads. The
per-fusion autotune cache keeps the kernel choices of each fusion in a folder
that a resumed or repeated run reads back instead of timing them again; the
kernel cache file keeps compiled kernels. Each setting has its own switch:
`KSEQ_XLA_COMPILE` holds `name=value` pairs joined by commas
("parallel_codegen=0,autotune_level=1,kernel_cache=1"). A flag already in
XLA_FLAGS is the user's and stays as it is. XLA:CPU ignores these flags.

XLA reads XLA_FLAGS once, at its first use in the process: set them before
anything compiles (`kseq.training.task.Run` does so with the persistent cache).
"""

import dataclasses
import os

ENVIRONMENT_VARIABLE = "KSEQ_XLA_COMPILE"


@dataclasses.dataclass(frozen=True)
class CompileSetting:
    """One switch: its default, the flags it sets and why."""

    default: str  # "1" on, "0" off, or a value ("" for XLA's own)
    flags: tuple  # templates with {value}, {cores}, {cache}
    why: str


SETTINGS = {
    "parallel_codegen": CompileSetting(
        "1", ("--xla_gpu_enable_llvm_module_compilation_parallelism=true",
              "--xla_gpu_force_compilation_parallelism={cores}"),
        "GPU code generation split over the machine's {cores} cores (one thread otherwise)"),
    "autotune_cache": CompileSetting(
        "1", ("--xla_gpu_per_fusion_autotune_cache_dir={cache}/autotune",),
        "each fusion's autotuned kernel kept in {cache}/autotune for a resumed or repeated run"),
    "kernel_cache": CompileSetting(
        "0", ("--xla_gpu_kernel_cache_file={cache}/kernels",),
        "compiled GPU kernels kept in {cache}/kernels"),
    "autotune_level": CompileSetting(
        "", ("--xla_gpu_autotune_level={value}",),
        "autotuning at level {value} (0: none, 4: XLA's default, the most)"),
}


def chosen_settings(environment=None):
    """Each setting's value: its default, or what `KSEQ_XLA_COMPILE` says.

    Args:
        environment: the environment to read (default `os.environ`).

    Returns:
        {name: value}: "1", "0", a level for `autotune_level`, or "" (XLA's own).

    Raises:
        ValueError: `KSEQ_XLA_COMPILE` names an unknown setting or gives a bad value.
    """
    environment = os.environ if environment is None else environment
    values = {name: setting.default for name, setting in SETTINGS.items()}
    for item in filter(None, (part.strip() for part in environment.get(ENVIRONMENT_VARIABLE, "").split(","))):
        name, _, value = item.partition("=")
        name, value = name.strip(), value.strip()
        allowed = ("0", "1", "2", "3", "4") if name == "autotune_level" else ("0", "1")
        if name not in SETTINGS or value not in allowed:
            raise ValueError(
                f"`{ENVIRONMENT_VARIABLE}` must hold name=value pairs joined by commas, names from "
                f"{', '.join(SETTINGS)} (autotune_level=0..4, the others =0 or =1); got {item!r}.")
        values[name] = value
    return values


def configure_compilation(cache, cores=None, environment=None):
    """Adds the chosen settings' flags to XLA_FLAGS where the user set none of them.

    Args:
        cache: the folder of the run's compile caches (the persistent cache's).
        cores: threads for code generation. Default: this machine's cores.
        environment: the environment to read and change (default `os.environ`).

    Returns:
        [(setting, one line: what it does and why, or why it was left)], in
        `SETTINGS` order, for the run to print.
    """
    environment = os.environ if environment is None else environment
    cores = cores or os.cpu_count() or 1
    present = environment.get("XLA_FLAGS", "").split()
    added, lines = [], []
    for name, value in chosen_settings(environment).items():
        setting = SETTINGS[name]
        flags = [flag.format(value=value, cores=cores, cache=cache) for flag in setting.flags]
        users = [f for f in present if f.split("=")[0] in {flag.split("=")[0] for flag in flags}]
        if users:
            lines.append((name, f"as XLA_FLAGS sets it ({' '.join(users)})"))
        elif value == ("" if name == "autotune_level" else "0"):
            lines.append((name, "off (XLA's own)" + (f": {ENVIRONMENT_VARIABLE} {name}=1 turns it on"
                                                    if setting.default == "0" else "")))
        else:
            added += flags
            lines.append((name, setting.why.format(value=value, cores=cores, cache=cache)))
    if added:
        for flag in added:  # XLA needs the autotune folder to exist
            if flag.startswith("--xla_gpu_per_fusion_autotune_cache_dir="):
                os.makedirs(flag.split("=", 1)[1], exist_ok=True)
        environment["XLA_FLAGS"] = " ".join(present + added)
    return lines


def describe(lines):
    """The settings as one printed line.

    Args:
        lines: `configure_compilation`'s result.

    Returns:
        "xla compile: name: what; ...".
    """
    return "xla compile (GPU only; XLA:CPU ignores these): " + "; ".join(f"{name}: {text}" for name, text in lines)
