"""The lab's figures: recorded probe rows in, a matplotlib Figure out (as tutorial.figures)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from tutorial.figures import empty_figure
from tutorial.tables import Row


def coalescer_plot(rows: Sequence[Row]) -> Figure:
    """The `coalescer` probe: left, how much of the second reader's traffic merged for every partner SM
    when both start together on data from DRAM, coloured by whether a cluster ever placed the partner with
    the anchor; right, how that share falls as the second reader starts later, data in L2 and in DRAM."""
    if not rows:
        return empty_figure("no recorded coalescer probe")
    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    partner_ax, delay_ax = fig.subplots(1, 2)
    anchor = rows[0]["sm_a"]
    together = [row for row in rows if row["delay"] == 0 and row["data"] == "DRAM"]
    for same, color, label in ((True, "tab:green", f"placed with SM {anchor} by a cluster"),
                               (False, "tab:gray", "never placed with it")):  # fmt: skip
        picked = [row for row in together if row["same_gpc"] is same]
        partner_ax.bar([row["sm_b"] for row in picked], [row["second_reader_merged"] for row in picked],
                       color=color, width=0.9, label=label)  # fmt: skip
    partner_ax.set_xlabel(f"partner SM (the other reader is on SM {anchor})")
    partner_ax.set_title("share of the 2nd reader merged, data from DRAM", fontsize=10)
    partner_ax.set_ylim(0, 1.05)
    partner_ax.legend(fontsize=8, loc="center")
    swept = sorted({row["sm_b"] for row in rows if row["delay"] > 0})
    for partner in swept:
        same = next(row["same_gpc"] for row in rows if row["sm_b"] == partner)
        where = "placed with" if same else "apart from"
        for data, style in (("L2", "o-"), ("DRAM", "s--")):
            line = sorted((row["delay"], row["second_reader_merged"]) for row in rows
                          if row["sm_b"] == partner and row["data"] == data)  # fmt: skip
            label = f"SM {partner} ({where} SM {anchor}), {data}"
            color = "tab:green" if same else "tab:gray"
            delay_ax.plot([max(d, 50) for d, _ in line], [s for _, s in line], style, color=color, label=label)
    delay_ax.set_xscale("log")
    delay_ax.set_xlabel("second reader starts late by, cycles (0 drawn at 50)")
    delay_ax.set_ylim(0, 1.05)
    delay_ax.set_title("share merged against start delay", fontsize=10)
    delay_ax.legend(fontsize=7)
    return fig
