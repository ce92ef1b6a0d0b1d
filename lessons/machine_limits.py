"""This machine's two limits, as the pages that draw a roofline show them (lessons 5 and 11).

Both read the engine's `info` job (memory bandwidth and matrix-multiply peak, measured once per
machine when quiet: engine.hardware) into the same three places: the chart's roofs, a line of
text naming the device and both figures, and the roofs in each download's header.
"""

from __future__ import annotations

from engine.lab.results import InfoResult
from widgets.roofline_chart import RooflineChart
from widgets.tables import sig


def limits_line(info: InfoResult) -> str:
    """'**This machine** (device, threads): memory bandwidth **X GB/s**, compute peak **Y
    GFLOP/s** (dtype matrix multiply)', and a note when other work disturbed the measurement
    (the limits are then not kept: engine.hardware)."""
    line = (f"**This machine** ({info.device_name}, {info.threads} threads): memory bandwidth "
            f"**{sig(info.memory_bandwidth_gbs)} GB/s**, compute peak "
            f"**{sig(info.matmul_gflops)} GFLOP/s** ({info.matmul_dtype} matrix multiply)")
    if info.disturbed:
        line = ("*Measured while other work took the engine's core, so both limits may read low: "
                "they are not kept, and are measured again when the machine is quiet.* " + line)
    return line


def show_limits(chart: RooflineChart, info: InfoResult) -> str:
    """Draw the info job's roofs on the chart; returns limits_line for the page's text."""
    chart.set_limits(info.memory_bandwidth_gbs, info.matmul_gflops)
    return limits_line(info)


def roofs(info: InfoResult | None) -> dict:
    """The limits as a download's header records them ({} before the info job has come)."""
    if info is None:
        return {}
    return {"memory_bandwidth_gbs": info.memory_bandwidth_gbs,
            "matmul_gflops": info.matmul_gflops, "ridge_flop_per_byte": info.ridge_flop_per_byte}
