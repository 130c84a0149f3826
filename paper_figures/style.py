"""One style table for every figure: scan order → label, colour, marker, hatch.

Labels follow the paper's legends ("Linear (cyclic)", "Sawtooth (alternating)"). Simulated series
are drawn hatched and say so in the legend; measured ones are solid.
"""
from __future__ import annotations

ORDER_STYLE = {
    "linear": dict(label="Linear (cyclic)", color="#4C72B0", marker="o"),
    "sawtooth": dict(label="Sawtooth (alternating)", color="#DD8452", marker="s"),
    "reverse": dict(label="Reverse", color="#55A868", marker="^"),
    "blockparity": dict(label="Block parity (ablation)", color="#8172B3", marker="v"),
}
FALLBACK = dict(label=None, color="#777777", marker="x")
SIMULATED_HATCH = "//"


def order_style(order: str) -> dict:
    base = ORDER_STYLE.get(order) or ORDER_STYLE.get(order.rstrip("0123456789")) or FALLBACK
    st = dict(base)
    if st["label"] is None:
        st["label"] = order
    elif order not in ORDER_STYLE:
        st["label"] += f" X={order[len(order.rstrip('0123456789')):]}"
    return st


def series_label(order: str, source: str) -> str:
    label = order_style(order)["label"]
    return label if source == "measured" else f"{label}, {source}"


def title_suffix(sources: set[str]) -> str:
    """' (simulated)' etc., so no simulated number can pass as a measurement."""
    others = sorted(s for s in sources if s != "measured")
    return f" ({' + '.join(others)})" if others else ""
