"""Where a profiled TensorFlow run's time went, read from the profiler's raw
trace: an XSpace (`*.xplane.pb`), gzipped (`.xplane.pb.gz`), split into
numbered gzip parts (`.xplane.pb.gz.part000`, ...), or a folder holding one.

GPU planes (`/device:GPU:N`): kernel time by TensorFlow op type and name
(the `tf_op` stat CUPTI takes from the op's annotation) and by kernel,
kernels and kernel milliseconds a step, the share of the GPU's active span
in which some kernel runs (the union of kernel intervals: streams overlap),
the longest idle gaps with the kernels and ops on either side, and memory
copies apart from kernels. The host (`/host:CPU`): TensorFlow op executions
("name:Type" events on its threads, tf_Compute and any other) a step and
their time by type, so a CPU trace reads the same way. Where it finds no GPU
plane, or one whose kernels it cannot find, it lists every plane's lines with
their event counts and first stat names, to adapt the reader by.

    .venv/bin/python benchmarks/trace_report.py DIR/plugins/profile/RUN --steps 5
    .venv/bin/python benchmarks/trace_report.py trace.xplane.pb.gz --steps 5 --json report.json
    .venv/bin/python benchmarks/trace_report.py trace.xplane.pb.gz.part000 --steps 5
"""

import argparse
import collections
import functools
import glob
import gzip
import importlib.util
import json
import os
import re
import sys

PART_BYTES = 15 * 2**20  # the device returns files of at most 16 MiB
PART_SUFFIX = re.compile(r"\.part(\d+)$")
TRACE_PATTERNS = ("*.xplane.pb", "*.xplane.pb.gz", "*.xplane.pb.gz.part000")
# A host op execution: "node/name:OpType". TraceMe names such as "Foo::Bar" or
# "EagerLocalExecute: fn" are not ops.
OP_EVENT = re.compile(r"^([^\s:][^:]*):([A-Za-z_][A-Za-z0-9_]*)$")
# Lines TensorBoard's converters derive from the kernels (they repeat the
# kernels' time) and lines that hold no device work.
NOT_ACTIVITY_LINES = {"Steps", "Framework Name Scope", "Framework Ops", "TensorFlow Name Scope",
                      "TensorFlow Ops", "XLA Modules", "XLA Ops", "Async XLA Ops", "Launch Stats",
                      "Source code", "Host Offload Ops", "_counters_", "CUPTI overhead"}
GAP_BUCKETS_US = (10, 100, 1000)
Activity = collections.namedtuple("Activity", "start end name op hlo_op")


def find_trace(path):
    """The trace file to read for `path`.

    Args:
        path: a trace file, one of its numbered parts, or a folder searched
            (recursively) for the newest trace.

    Returns:
        The file's path (the first part for a split trace).
    """
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise FileNotFoundError(f"trace path {path!r}: expected a trace file or a folder holding one; "
                                "it does not exist")
    found = [found for pattern in TRACE_PATTERNS
             for found in glob.glob(os.path.join(path, "**", pattern), recursive=True)]
    if not found:
        raise FileNotFoundError(f"trace path {path!r}: no {', '.join(TRACE_PATTERNS)} under this folder")
    return max(found, key=lambda name: (os.path.getmtime(name), name))


def read_trace_bytes(path):
    """The XSpace's serialized bytes, gunzipped and joined from parts as needed.

    Args:
        path: as for `find_trace`.

    Returns:
        (bytes, the file read or the first part).
    """
    path = find_trace(path)
    match = PART_SUFFIX.search(path)
    if match:
        prefix = path[:match.start()]
        parts = [name for name in glob.glob(glob.escape(prefix) + ".part*") if PART_SUFFIX.search(name)]
        parts.sort(key=lambda name: int(PART_SUFFIX.search(name).group(1)))
        numbers = [int(PART_SUFFIX.search(name).group(1)) for name in parts]
        if numbers != list(range(len(parts))):
            raise FileNotFoundError(f"trace path {path!r}: parts must be numbered from 0 without a gap, "
                                    f"found {numbers}")
        path = parts[0]
    else:
        prefix, parts = path, [path]
    data = b""
    for name in parts:
        with open(name, "rb") as f:
            data += f.read()
    return (gzip.decompress(data) if prefix.endswith(".gz") else data), path


@functools.cache
def xplane_module():
    """TensorFlow's xplane_pb2, loaded from its file where TensorFlow is not
    imported yet: importing the package first takes seconds, the protobuf
    module alone a fraction of one."""
    if "tensorflow" not in sys.modules:
        package = importlib.util.find_spec("tensorflow")
        path = os.path.join(os.path.dirname(package.origin), "tsl", "profiler", "protobuf", "xplane_pb2.py")
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("_tensorflow_xplane_pb2", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    return xplane_pb2


def load_space(path):
    """The profiler's XSpace read from `path` (see `find_trace`).

    Args:
        path: a trace file, a part, or a folder.

    Returns:
        (XSpace, the file read).
    """
    data, path = read_trace_bytes(path)
    space = xplane_module().XSpace()
    try:
        space.ParseFromString(data)
    except Exception as error:  # protobuf's DecodeError
        raise ValueError(f"trace path {path!r}: expected an XSpace protobuf, could not parse it ({error})") from error
    return space, path


def save_trace(xplane_path, folder, name, part_bytes=PART_BYTES):
    """Writes a raw trace gzipped into `folder`, in numbered parts where larger than `part_bytes`.

    Args:
        xplane_path: the profiler's `*.xplane.pb`.
        folder: where to write (created if missing).
        name: the file name before `.xplane.pb.gz`.
        part_bytes: the largest file written.

    Returns:
        The paths written, in order.
    """
    with open(xplane_path, "rb") as f:
        data = gzip.compress(f.read())
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, name + ".xplane.pb.gz")
    chunks = [data] if len(data) <= part_bytes else [data[i:i + part_bytes] for i in range(0, len(data), part_bytes)]
    paths = [base] if len(chunks) == 1 else [f"{base}.part{index:03d}" for index in range(len(chunks))]
    for path, chunk in zip(paths, chunks):
        with open(path, "wb") as f:
            f.write(chunk)
    return paths


def stat_values(plane, *holders):
    """{stat name: value} of events or metadata, references resolved to their strings."""
    values = {}
    for holder in holders:
        for stat in holder.stats:
            kind = stat.WhichOneof("value")
            value = getattr(stat, kind) if kind else None
            if kind == "ref_value":
                value = plane.stat_metadata[value].name
            elif kind == "bytes_value":
                value = f"<{len(value)} bytes>"
            values[plane.stat_metadata[stat.metadata_id].name] = value
    return values


def timed_events(plane, line):
    """(start ps, end ps, name, stats) of a line's events; times from the line's timestamp."""
    base = line.timestamp_ns * 1000
    for event in line.events:
        if event.WhichOneof("data") != "offset_ps":
            continue  # an aggregate (num_occurrences) has no time of its own
        metadata = plane.event_metadata[event.metadata_id]
        start = base + event.offset_ps
        yield start, start + event.duration_ps, metadata.name, stat_values(plane, metadata, event)


def activity_kind(line_name, event_name, stats):
    """"kernel", "memcpy" (memset included) or None for a device event."""
    names = {name.lower() for name in stats}
    if names & {"memalloc_details", "memfree_details", "memoryresidency_details"}:
        return None
    if names & {"memcpy_details", "memset_details"} or event_name.startswith(("Memcpy", "Memset")):
        return "memcpy"
    if "kernel_details" in names or line_name.startswith("Stream"):
        return "kernel"
    return None


def launch_ops(space):
    """{correlation id: tf_op} from CUPTI's host-side launch events, for kernels without tf_op."""
    ops = {}
    for plane in space.planes:
        if plane.name.startswith("/host:CUPTI"):
            for line in plane.lines:
                for _, _, _, stats in timed_events(plane, line):
                    if "correlation_id" in stats and stats.get("tf_op"):
                        ops[stats["correlation_id"]] = stats["tf_op"]
    return ops


def split_op(op):
    """("node/name", "OpType") of a "node/name:OpType" op."""
    name, _, kind = op.rpartition(":")
    return (name, kind) if name else (op, op)


def ranked(totals, counts, steps, top, total_ps):
    """The `top` entries of {key: picoseconds}, most first, with counts, ms and shares."""
    return [dict(name=key, ms=round(ps / 1e9, 3), ms_per_step=round(ps / 1e9 / steps, 3),
                 count=counts[key], count_per_step=round(counts[key] / steps, 1), share=round(ps / total_ps, 4) if total_ps else None)
            for key, ps in totals.most_common(top)]


def busy_intervals(kernels):
    """Merged [start, end, first kernel, last-ending kernel] of overlapping kernels."""
    merged = []
    for kernel in sorted(kernels, key=lambda kernel: (kernel.start, kernel.end)):
        if merged and kernel.start <= merged[-1][1]:
            if kernel.end > merged[-1][1]:
                merged[-1][1], merged[-1][3] = kernel.end, kernel
        else:
            merged.append([kernel.start, kernel.end, kernel, kernel])
    return merged


def device_activities(plane, correlated_ops=None):
    """A GPU plane's kernels and memory copies as Activity tuples (times in ps).

    Args:
        plane: an XPlane named like "/device:GPU:0".
        correlated_ops: {correlation id: tf_op} for kernels without a tf_op stat.

    Returns:
        (kernels, copies).
    """
    kernels, copies = [], []
    for line in plane.lines:
        if line.name in NOT_ACTIVITY_LINES:
            continue
        for start, end, name, stats in timed_events(plane, line):
            kind = activity_kind(line.name, name, stats)
            op = stats.get("tf_op") or (correlated_ops or {}).get(stats.get("correlation_id")) or "(no tf_op)"
            activity = Activity(start, end, name, str(op), stats.get("hlo_op"))
            if kind == "kernel":
                kernels.append(activity)
            elif kind == "memcpy":
                copies.append(activity)
    return kernels, copies


def idle_gaps(intervals, span_start, count):
    """Idle time between busy intervals: ms by gap size, and the `count` longest gaps with their neighbours."""
    gaps = [(after[0] - before[1], before, after) for before, after in zip(intervals, intervals[1:])]
    labels = [f"under {us} us" for us in GAP_BUCKETS_US] + [f"{GAP_BUCKETS_US[-1]} us and over"]
    buckets = dict.fromkeys(labels, 0)
    for gap_ps, _, _ in gaps:
        buckets[next((label for us, label in zip(GAP_BUCKETS_US, labels) if gap_ps < us * 1e6), labels[-1])] += gap_ps
    longest = [dict(ms=round(gap_ps / 1e9, 3), at_ms=round((before[1] - span_start) / 1e9, 3),
                    kernel_before=before[3].name, op_before=before[3].op,
                    kernel_after=after[2].name, op_after=after[2].op)
               for gap_ps, before, after in sorted(gaps, key=lambda gap: -gap[0])[:count]]
    return dict(idle_gaps=len(gaps), idle_ms_by_gap_size={key: round(ps / 1e9, 3) for key, ps in buckets.items()},
                longest_gaps=longest)


def gpu_report(plane, steps, top=15, gap_count=10, correlated_ops=None):
    """A GPU plane's kernels, busy share, idle gaps and copies; None where it holds no kernel.

    Args:
        plane: an XPlane named like "/device:GPU:0".
        steps: how many steps the trace holds (per-step figures divide by it).
        top: entries kept in each ranking.
        gap_count: longest idle gaps kept.
        correlated_ops: {correlation id: tf_op} for kernels without a tf_op stat.

    Returns:
        A dict of figures (times in ms), or None.
    """
    kernels, copies = device_activities(plane, correlated_ops)
    if not kernels:
        return None
    kernel_ps = sum(k.end - k.start for k in kernels)
    rankings = {key: (collections.Counter(), collections.Counter())
                for key in ("by_op_type", "by_op", "by_kernel", "by_hlo_op")}
    for kernel in kernels:
        keys = dict(by_op_type=split_op(kernel.op)[1], by_op=kernel.op, by_kernel=kernel.name, by_hlo_op=kernel.hlo_op)
        for ranking, key in keys.items():
            if key is not None:  # hlo_op: only kernels XLA compiled
                rankings[ranking][0][key] += kernel.end - kernel.start
                rankings[ranking][1][key] += 1
    intervals = busy_intervals(kernels)
    busy_ps = sum(end - start for start, end, _, _ in intervals)
    span_start = min(a.start for a in kernels + copies)
    span_ps = max(a.end for a in kernels + copies) - span_start
    copy_ps, copy_kinds = sum(c.end - c.start for c in copies), collections.Counter()
    for copy in copies:
        copy_kinds[copy.name] += copy.end - copy.start
    device = stat_values(plane, plane).get("gpu_device_name", "")
    return dict(
        plane=plane.name, device=device, kernels=len(kernels), kernels_per_step=round(len(kernels) / steps, 1),
        kernel_ms=round(kernel_ps / 1e9, 3), kernel_ms_per_step=round(kernel_ps / 1e9 / steps, 3),
        span_ms=round(span_ps / 1e9, 3), busy_ms=round(busy_ps / 1e9, 3),
        busy_share=round(busy_ps / span_ps, 4) if span_ps else None,
        **idle_gaps(intervals, span_start, gap_count),
        memcpy=dict(count=len(copies), ms=round(copy_ps / 1e9, 3), ms_per_step=round(copy_ps / 1e9 / steps, 3),
                    ms_by_kind={kind: round(ps / 1e9, 3) for kind, ps in copy_kinds.most_common()}),
        **{ranking: ranked(totals, counts, steps, top, kernel_ps) for ranking, (totals, counts) in rankings.items()})


def host_report(plane, steps, top=15):
    """A host plane's TensorFlow op executions: how many a step and their time by type.

    Args:
        plane: the "/host:CPU" XPlane.
        steps: how many steps the trace holds.
        top: op types kept.

    Returns:
        A dict of figures (times in ms).
    """
    by_type, type_counts, threads = collections.Counter(), collections.Counter(), collections.Counter()
    count = total_ps = 0
    for line in plane.lines:
        thread = line.name.split("/")[0]
        for start, end, name, _ in timed_events(plane, line):
            match = OP_EVENT.match(name)
            # "__"-prefixed names are the runtime's own (function bodies), not graph ops.
            if not match or name.startswith("__"):
                continue
            count += 1
            total_ps += end - start
            by_type[match.group(2)] += end - start
            type_counts[match.group(2)] += 1
            threads[thread] += 1
    return dict(plane=plane.name, ops=count, ops_per_step=round(count / steps, 1),
                op_ms=round(total_ps / 1e9, 3), op_ms_per_step=round(total_ps / 1e9 / steps, 3),
                ops_by_thread=dict(threads.most_common()), by_op_type=ranked(by_type, type_counts, steps, top, total_ps))


def plane_inventory(space, stat_names=6):
    """Every plane's lines with event counts and the first stat names seen, to adapt the reader by.

    Args:
        space: an XSpace.
        stat_names: how many distinct stat names to keep a line.

    Returns:
        A list of {"plane", "plane_stats", "lines": [{"line", "events", "stats"}]}.
    """
    planes = []
    for plane in space.planes:
        lines = []
        for line in plane.lines:
            names = []
            for event in line.events[:50]:
                for stat in list(event.stats) + list(plane.event_metadata[event.metadata_id].stats):
                    name = plane.stat_metadata[stat.metadata_id].name
                    if name not in names and len(names) < stat_names:
                        names.append(name)
            lines.append(dict(line=line.name, events=len(line.events), stats=names))
        planes.append(dict(plane=plane.name, plane_stats=sorted(stat_values(plane, plane)), lines=lines))
    return planes


def build_report(space, steps, top=15, gap_count=10):
    """The whole report of an XSpace.

    Args:
        space: an XSpace.
        steps: how many steps the trace holds.
        top: entries kept in each ranking.
        gap_count: longest idle gaps kept a GPU.

    Returns:
        {"steps", "gpu": [a report per readable GPU plane], "host": report or None,
        "unread_gpu_planes": [names], "planes": inventory where a GPU plane is missing or unread}.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive integer (the profiled steps), got {steps!r}")
    correlated = launch_ops(space)
    gpus, unread, host = [], [], None
    for plane in space.planes:
        if plane.name.startswith("/device:GPU"):
            report = gpu_report(plane, steps, top, gap_count, correlated)
            if report:
                gpus.append(report)
            else:
                unread.append(plane.name)
        elif plane.name == "/host:CPU":
            host = host_report(plane, steps, top)
    report = dict(steps=steps, gpu=gpus, host=host, unread_gpu_planes=unread)
    if unread or not gpus:
        report["planes"] = plane_inventory(space)
    return report


def shorten(text, width, keep_end=False):
    """`text` cut to `width` characters, marking the cut; `keep_end` keeps
    the end (an op's type and innermost scopes) rather than the start."""
    if len(text) <= width:
        return text
    return "..." + text[3 - width:] if keep_end else text[:width - 3] + "..."


def ranking_lines(title, entries, width=60, keep_end=False):
    """A ranking's text lines: name, ms a step, share, occurrences a step."""
    lines = [f"  {title}:"]
    for entry in entries:
        share = f"{entry['share']:6.1%}" if entry["share"] is not None else "      "
        lines.append(f"    {shorten(entry['name'], width, keep_end):{width}s} {entry['ms_per_step']:10.3f} ms/step {share} "
                     f"{entry['count_per_step']:8.1f}/step")
    return lines


def format_report(report):
    """The report as text.

    Args:
        report: from `build_report`.

    Returns:
        The text, one figure or ranking entry a line.
    """
    out = [f"{report.get('trace', 'trace')}: {report['steps']} step(s)"]
    for gpu in report["gpu"]:
        out.append(f"{' '.join(filter(None, (gpu['plane'], gpu['device'])))}: {gpu['kernels_per_step']} kernels a step taking "
                   f"{gpu['kernel_ms_per_step']} ms; busy {gpu['busy_ms']} of {gpu['span_ms']} ms active span "
                   f"({gpu['busy_share']:.1%}), {gpu['idle_gaps']} idle gaps")
        out.append(f"  idle ms by gap size: {gpu['idle_ms_by_gap_size']}")
        memcpy = gpu["memcpy"]
        out.append(f"  memcpy/memset apart from kernels: {memcpy['count']} taking {memcpy['ms_per_step']} ms a step "
                   f"(ms in all by kind: {memcpy['ms_by_kind']})")
        out += ranking_lines("kernel time by TensorFlow op type", gpu["by_op_type"])
        out += ranking_lines("by TensorFlow op", gpu["by_op"], keep_end=True)
        out += ranking_lines("by kernel", gpu["by_kernel"])
        if gpu["by_hlo_op"]:
            out += ranking_lines("by XLA op (hlo_op)", gpu["by_hlo_op"])
        out.append("  longest idle gaps (ms, at ms from the span's start: kernel and op before -> after):")
        for gap in gpu["longest_gaps"]:
            out.append(f"    {gap['ms']:8.3f} at {gap['at_ms']:9.3f}: {shorten(gap['kernel_before'], 40)} "
                       f"({shorten(gap['op_before'], 50, True)}) -> {shorten(gap['kernel_after'], 40)} "
                       f"({shorten(gap['op_after'], 50, True)})")
    host = report["host"]
    if host:
        out.append(f"{host['plane']}: {host['ops_per_step']} TensorFlow ops a step taking {host['op_ms_per_step']} ms "
                   f"(threads: {host['ops_by_thread']})")
        out += ranking_lines("host op time by type", host["by_op_type"])
    if report["unread_gpu_planes"]:
        out.append(f"GPU planes without kernels this reader finds: {report['unread_gpu_planes']}")
    if "planes" in report:
        out.append("no readable GPU plane; the trace's planes (lines: events, first stat names):")
        for plane in report["planes"]:
            out.append(f"  {plane['plane']!r} {len(plane['lines'])} lines, plane stats {plane['plane_stats']}")
            for line in plane["lines"]:
                out.append(f"    {line['line']!r}: {line['events']} events {line['stats']}")
    return "\n".join(out)


def main(argv=None):
    """Reads a trace, prints its report and writes it as JSON where asked.

    Args:
        argv: the command line's arguments (default: sys.argv's).

    Returns:
        The report (a dict).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("trace", help="*.xplane.pb, *.xplane.pb.gz, its .part000, or a folder holding one")
    parser.add_argument("--steps", type=int, default=1, help="profiled steps the trace holds (default 1)")
    parser.add_argument("--top", type=int, default=15, help="entries in each ranking")
    parser.add_argument("--gaps", type=int, default=10, help="longest idle gaps listed")
    parser.add_argument("--json", help="also write the report as JSON here")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps: expected a positive integer (the profiled steps), got {args.steps}")
    try:
        space, path = load_space(args.trace)
    except (OSError, ValueError) as error:  # missing, not gzip, not an XSpace
        parser.error(str(error))
    report = dict(trace=path, **build_report(space, args.steps, args.top, args.gaps))
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main(sys.argv[1:])
