"""benchmarks/trace_report.py reads TensorFlow profiler traces: a real CPU
trace, a synthetic GPU plane laid out as TF 2.21's CUPTI collector writes it,
a trace without a GPU plane, and gzipped traces split into parts."""

import gzip
import json
import os

import pytest
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from support import load_benchmark

trace_report = load_benchmark("trace_report")
US = 10**6  # picoseconds
# oneDNN's graph pass renames MatMul to _MklMatMul on CPUs where it takes the op (AVX-512 ones).
MATMUL = {"MatMul", "_MklMatMul"}


@pytest.fixture(scope="module")
def cpu_logdir(tmp_path_factory):
    """A real profiler trace of five calls of a small tf.function on the CPU."""
    logdir = str(tmp_path_factory.mktemp("profile"))
    weights = tf.Variable(tf.ones((8, 8)))

    @tf.function
    def step(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, weights)))

    x = tf.ones((4, 8))
    step(x)  # traced outside the profile
    tf.profiler.experimental.start(logdir)
    for _ in range(5):
        step(x).numpy()
    tf.profiler.experimental.stop()
    return logdir


def test_reads_a_real_cpu_trace(cpu_logdir):
    space, path = trace_report.load_space(cpu_logdir)
    assert path.endswith(".xplane.pb")
    report = trace_report.build_report(space, steps=5)
    host = report["host"]
    counts = {entry["name"]: entry["count"] for entry in host["by_op_type"]}
    assert sum(counts.get(name, 0) for name in MATMUL) == 5 and counts["Relu"] == 5 and counts["Sum"] == 5
    assert host["ops"] == sum(counts.values()) and host["ops_per_step"] == host["ops"] / 5
    assert set(host["ops_by_thread"]) == {"tf_Compute"}
    assert report["gpu"] == [] and "planes" in report  # no GPU here: the planes are listed


def test_train_step_summary_saves_the_trace_and_its_report(cpu_logdir, tmp_path):
    train_step = load_benchmark("train_step")
    summary = train_step.profile_summary(cpu_logdir, "cfg", str(tmp_path))
    assert summary["trace_files"] == [str(tmp_path / "cfg.xplane.pb.gz")]
    assert summary["ops_per_step"] >= 3 and MATMUL & set(dict(summary["top_ops"]))
    with open(summary["trace_report"]) as f:
        saved = json.load(f)
    assert saved["host"]["ops"] == round(summary["ops_per_step"] * train_step.PROFILED_STEPS)
    space, _ = trace_report.load_space(str(tmp_path))
    assert any(plane.name == "/host:CPU" for plane in space.planes)


class PlaneBuilder:
    """An XPlane filled the way the profiler does: names and stat names in metadata tables."""

    def __init__(self, space, name):
        self.plane = space.planes.add(id=len(space.planes), name=name)
        self.stat_ids, self.event_ids = {}, {}

    def stat_id(self, name):
        if name not in self.stat_ids:
            self.stat_ids[name] = len(self.stat_ids) + 1
            self.plane.stat_metadata[self.stat_ids[name]].CopyFrom(
                xplane_pb2.XStatMetadata(id=self.stat_ids[name], name=name))
        return self.stat_ids[name]

    def line(self, name, timestamp_ns=1000):
        return self.plane.lines.add(id=len(self.plane.lines), name=name, timestamp_ns=timestamp_ns)

    def event(self, line, name, start_us, end_us, **stats):
        if name not in self.event_ids:
            self.event_ids[name] = len(self.event_ids) + 1
            self.plane.event_metadata[self.event_ids[name]].CopyFrom(
                xplane_pb2.XEventMetadata(id=self.event_ids[name], name=name))
        event = line.events.add(metadata_id=self.event_ids[name], offset_ps=int(start_us * US),
                                duration_ps=int((end_us - start_us) * US))
        for key, value in stats.items():
            stat = event.stats.add(metadata_id=self.stat_id(key))
            if isinstance(value, int):
                stat.int64_value = value
            else:  # strings are references to stat metadata, as the collector writes them
                stat.ref_value = self.stat_id(value)


def gpu_space():
    """Two streams of kernels (tf_op, kernel_details, correlation_id), a copy, a
    derived ops line, a kernel named only through CUPTI's launch, host ops."""
    space = xplane_pb2.XSpace()
    gpu = PlaneBuilder(space, "/device:GPU:0")
    details = "regs:32 static_shared:0 dynamic_shared:0 grid:1,1,1 block:128,1,1 occ_pct:50.0"
    compute = gpu.line("Stream #13(Kernel,MemcpyD2D)")
    gpu.event(compute, "sgemm_kernel", 0, 100, correlation_id=1, kernel_details=details, tf_op="dense/MatMul:MatMul")
    gpu.event(compute, "relu_kernel", 100, 150, correlation_id=2, kernel_details=details, tf_op="dense/Relu:Relu")
    gpu.event(compute, "MemcpyD2D", 150, 170, correlation_id=3,
              memcpy_details="kind_src:device kind_dst:device size:4096 dest:0 async:1")
    gpu.event(compute, "sgemm_kernel", 400, 500, correlation_id=4, kernel_details=details,
              tf_op="dense_1/MatMul:MatMul")
    other = gpu.line("Stream #14(Kernel)")
    gpu.event(other, "add_kernel", 50, 120, correlation_id=5, kernel_details=details, tf_op="add:AddV2",
              hlo_op="fusion.1")
    gpu.event(other, "reduce_kernel", 2000, 2010, correlation_id=77, kernel_details=details)
    derived = gpu.line("Framework Ops")  # repeats kernel time; must not count
    gpu.event(derived, "dense/MatMul:MatMul", 0, 3000)
    cupti = PlaneBuilder(space, "/host:CUPTI")
    gpu.event(gpu.line("CUPTI overhead"), "overhead", 0, 5000)
    cupti.event(cupti.line("Host Threads/7"), "cuLaunchKernel", 1990, 1995, correlation_id=77, tf_op="loss/Sum:Sum")
    host = PlaneBuilder(space, "/host:CPU")
    thread = host.line("tf_Compute/42")
    host.event(thread, "dense/MatMul:MatMul", 0, 8)
    host.event(thread, "ExecutorState::Process", 0, 30)
    host.event(thread, "dense/Relu:Relu", 10, 12)
    host.event(host.line("python"), "EagerLocalExecute: __inference_step_1", 0, 40)
    return space


def test_gpu_figures_match_hand_computed_ones():
    report = trace_report.build_report(gpu_space(), steps=2)
    assert report["unread_gpu_planes"] == [] and "planes" not in report
    gpu, = report["gpu"]
    # Kernels: 100 + 50 + 100 + 70 + 10 us over 2 steps.
    assert gpu["kernels"] == 5 and gpu["kernels_per_step"] == 2.5
    assert gpu["kernel_ms"] == 0.33 and gpu["kernel_ms_per_step"] == 0.165
    # Busy: [0, 150] (three overlapping kernels), [400, 500], [2000, 2010]; active span 0 to 2010 us.
    assert gpu["busy_ms"] == 0.26 and gpu["span_ms"] == 2.01
    assert gpu["busy_share"] == round(260 / 2010, 4)
    assert gpu["idle_gaps"] == 2
    assert gpu["idle_ms_by_gap_size"] == {"under 10 us": 0, "under 100 us": 0, "under 1000 us": 0.25,
                                          "1000 us and over": 1.5}
    first, second = gpu["longest_gaps"]
    assert first == dict(ms=1.5, at_ms=0.5, kernel_before="sgemm_kernel", op_before="dense_1/MatMul:MatMul",
                         kernel_after="reduce_kernel", op_after="loss/Sum:Sum")  # the op through CUPTI's launch
    assert second == dict(ms=0.25, at_ms=0.15, kernel_before="relu_kernel", op_before="dense/Relu:Relu",
                          kernel_after="sgemm_kernel", op_after="dense_1/MatMul:MatMul")
    by_type = {entry["name"]: (entry["ms"], entry["count"]) for entry in gpu["by_op_type"]}
    assert by_type == {"MatMul": (0.2, 2), "AddV2": (0.07, 1), "Relu": (0.05, 1), "Sum": (0.01, 1)}
    assert gpu["by_op_type"][0]["share"] == round(200 / 330, 4)
    assert [entry["name"] for entry in gpu["by_op"]][:2] == ["dense/MatMul:MatMul", "dense_1/MatMul:MatMul"]
    assert {entry["name"]: entry["ms"] for entry in gpu["by_kernel"]} == {
        "sgemm_kernel": 0.2, "add_kernel": 0.07, "relu_kernel": 0.05, "reduce_kernel": 0.01}
    assert [(entry["name"], entry["ms"]) for entry in gpu["by_hlo_op"]] == [("fusion.1", 0.07)]
    assert gpu["memcpy"] == dict(count=1, ms=0.02, ms_per_step=0.01, ms_by_kind={"MemcpyD2D": 0.02})
    host = report["host"]
    assert host["ops"] == 2 and host["ops_per_step"] == 1.0
    assert {entry["name"] for entry in host["by_op_type"]} == {"MatMul", "Relu"}


def test_prints_the_planes_when_no_gpu_plane_is_readable(tmp_path, capsys):
    space = xplane_pb2.XSpace()
    host = PlaneBuilder(space, "/host:CPU")
    host.event(host.line("tf_Compute/1"), "x/MatMul:MatMul", 0, 5, id=3)
    odd = PlaneBuilder(space, "/device:GPU:0")  # a layout this reader does not know
    odd_line = odd.line("Activity 9")
    for start in (0, 10, 20):
        odd.event(odd_line, "some_kernel", start, start + 5, launch_id=start)
    path = tmp_path / "odd.xplane.pb"
    path.write_bytes(space.SerializeToString())
    report = trace_report.main([str(path), "--steps", "1", "--json", str(tmp_path / "report.json")])
    printed = capsys.readouterr().out
    assert report["gpu"] == [] and report["unread_gpu_planes"] == ["/device:GPU:0"]
    assert "'/device:GPU:0' 1 lines" in printed
    assert "'Activity 9': 3 events ['launch_id']" in printed
    assert "'tf_Compute/1': 1 events ['id']" in printed
    assert json.loads((tmp_path / "report.json").read_text())["unread_gpu_planes"] == ["/device:GPU:0"]


def test_gzipped_and_split_traces_read_back(tmp_path):
    raw = tmp_path / "run" / "host.xplane.pb"
    raw.parent.mkdir()
    serialized = gpu_space().SerializeToString()
    raw.write_bytes(serialized)
    whole = trace_report.save_trace(str(raw), str(tmp_path / "whole"), "cfg")
    assert whole == [str(tmp_path / "whole" / "cfg.xplane.pb.gz")]
    assert gzip.decompress(open(whole[0], "rb").read()) == serialized
    part_bytes = 200
    parts = trace_report.save_trace(str(raw), str(tmp_path / "split"), "cfg", part_bytes=part_bytes)
    assert len(parts) == -(-len(gzip.compress(serialized)) // part_bytes) > 2
    assert parts[0].endswith("cfg.xplane.pb.gz.part000") and parts[-1].endswith(f".part{len(parts) - 1:03d}")
    assert all(os.path.getsize(part) <= part_bytes for part in parts)
    for path in (whole[0], str(tmp_path / "whole"), parts[0], parts[-1], str(tmp_path / "split")):
        space, _ = trace_report.load_space(path)
        assert space.SerializeToString() == serialized, path
    os.remove(parts[1])
    with pytest.raises(FileNotFoundError, match="numbered from 0 without a gap"):
        trace_report.load_space(parts[0])


def test_bad_input_names_the_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="trace path .*does not exist"):
        trace_report.load_space(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="no \\*.xplane.pb"):
        trace_report.load_space(str(tmp_path))
    (tmp_path / "bad.xplane.pb").write_bytes(b"not a protobuf \xff\xff")
    with pytest.raises(ValueError, match="expected an XSpace protobuf"):
        trace_report.load_space(str(tmp_path / "bad.xplane.pb"))
    with pytest.raises(ValueError, match="steps: expected a positive integer"):
        trace_report.build_report(xplane_pb2.XSpace(), steps=0)
