"""The box on GPUs: datasheet rows with their sources, this machine's measured row first once
the engine has described it, and on a GPU that measured row is the GPU and the box says so. No
GPU is lent to these tests: the GPU case is the same code fed a GPU's `info`."""

from __future__ import annotations

from engine.calc.gpu_scaling import A100, H100
from lessons.on_a_gpu import GpuBox

CPU_INFO = {"device": "cpu", "device_name": "cpu: Test CPU (2 cores)",
            "memory_bandwidth_gbs": 10.0, "matmul_gflops": 80.0}
GPU_INFO = {"device": "cuda:0", "device_name": "cuda: NVIDIA H100 80GB HBM3",
            "memory_bandwidth_gbs": 3000.0, "matmul_gflops": 700_000.0}


def finding(machines) -> str:
    return "<p>" + ", ".join(f"{m.name}: ridge {m.ridge:.1f}" for m in machines) + "</p>"


def test_before_the_engine_answers_the_datasheet_rows_and_their_sources():
    box = GpuBox(finding)
    text = box.text
    assert "<h2>On a GPU</h2>" in text and "once the engine has measured them" in text
    assert "NVIDIA A100 80GB SXM: ridge 153.0" in text and "H100 SXM: ridge 295.4" in text
    assert A100.source in text and H100.source in text and "(measured here)" not in text


def test_on_a_cpu_the_measured_row_comes_first_and_gpu_rows_are_computed():
    box = GpuBox(finding)
    box.set_info(CPU_INFO)
    assert box.machines[0].measured and box.machines[0].ridge == 8.0
    assert "cpu: Test CPU (2 cores) (measured here)" in box.text
    assert "This machine is a CPU" in box.text and "runs on a GPU" not in box.text


def test_on_a_gpu_the_box_shows_that_gpus_measured_numbers():
    box = GpuBox(finding)
    box.set_info(GPU_INFO)
    assert box.gpu_here
    assert "This app runs on a GPU (cuda: NVIDIA H100 80GB HBM3): the first row is measured " \
           "here" in box.text
    assert "cuda: NVIDIA H100 80GB HBM3: ridge 233.3" in box.text  # 700,000 / 3,000


def test_it_asks_the_engine_once():
    asked = []

    class Jobs:
        def submit(self, kind, params, on_event, **queue):
            asked.append((kind, queue))

    box = GpuBox(finding)
    box.fetch(Jobs())
    box.fetch(Jobs())
    # aside: the box's machine description is not the reader's first number (job_queue rule 0)
    assert asked == [("info", {"aside": True})]
