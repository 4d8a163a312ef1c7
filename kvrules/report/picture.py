"""A drawing of a plan's memory layout (``kvrules plan --picture layout.svg``), with matplotlib.

One row per KV-cache tensor of a worker, one lane per KV-cache group. A lane shows the page of
the group's layer that lives in that tensor: real bytes coloured by spec type, page padding
hatched, and an empty slot (a group shorter than the others) drawn as a dashed outline. The x
axis is the bytes of one block; a packed layout places each page at its offset in the block.

matplotlib is an optional dependency (``pip install kvrules[plot]``) imported only when drawing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvrules.errors import KVRulesError
from kvrules.plan import Plan, WorkerPlan
from kvrules.units import format_size

FORMATS = (".svg", ".png", ".pdf")
LANE = 0.24  # inches per lane
COLORS = {
    "full_attention": "#4C78A8",
    "sliding_window": "#72B7B2",
    "chunked_local": "#54A24B",
    "mla": "#B279A2",
    "sliding_window_mla": "#E45756",
    "mamba": "#F58518",
    "cross_attention": "#9D755D",
    "encoder_only": "#BAB0AC",
    "sink_full_attention": "#EECA3B",
}
OTHER = "#888888"


class PictureError(KVRulesError):
    """The picture cannot be drawn: matplotlib is missing, or the file type is not supported."""


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PictureError(
            "drawing a picture needs matplotlib, which is not installed; install it with "
            "`pip install kvrules[plot]` (or `pip install matplotlib`)"
        ) from None
    return matplotlib, Figure, FigureCanvasAgg


def _short(name: str, limit: int = 38) -> str:
    return name if len(name) <= limit else "..." + name[-(limit - 3) :]


def _lanes(worker: WorkerPlan, index: int) -> list[list[str | None]]:
    """For tensor ``index``: per group, the layers of that group living in the tensor (``[None]`` if none)."""
    tensor = worker.tensors[index]
    members = set(tensor.shared_by)
    lanes: list[list[str | None]] = []
    for group in worker.groups:
        if not group.layer_names:
            continue
        here: list[str | None] = [n for n in group.layer_names if n in members]
        lanes.append(here or [None])
    return lanes


def draw_layout(
    plan: Plan, path: str | Path, *, worker: int = 0, title: str | None = None, max_rows: int = 32
) -> Path:
    """Draw worker ``worker``'s tensors of ``plan`` to ``path`` (``.svg``, ``.png`` or ``.pdf``).

    :raises PictureError: matplotlib missing, or an unsupported file type.
    """
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise PictureError(f"picture {out}: use a file ending in {', '.join(FORMATS)}")
    if not 0 <= worker < len(plan.workers):
        raise PictureError(
            f"picture: the plan has {len(plan.workers)} workers; worker {worker} does not exist"
        )
    matplotlib, figure_cls, canvas_cls = _matplotlib()
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import FuncFormatter

    wp = plan.workers[worker]
    rows = list(range(min(len(wp.tensors), max_rows)))
    lanes = [_lanes(wp, r) for r in rows]
    per_row = [sum(len(lane) for lane in row) for row in lanes] or [1]
    height = 1.6 + LANE * (sum(per_row) + len(rows))
    fig = figure_cls(figsize=(12, max(3.0, height)))
    canvas_cls(fig)
    ax = fig.add_subplot(1, 1, 1)
    types_seen: dict[str, str] = {}
    has_padding = has_empty = has_draft = False
    y = 0.0
    ticks: list[float] = []
    labels: list[str] = []
    widest = 1
    for row, row_lanes in zip(rows, lanes, strict=True):
        tensor = wp.tensors[row]
        start = y
        for lane_index, lane in enumerate(row_lanes):
            for name in lane:
                if name is None:
                    page = max(
                        (plan.specs[n].page_size_bytes for n in tensor.shared_by if n in plan.specs),
                        default=0,
                    )
                    ax.add_patch(
                        Rectangle((0, y), page, 0.8, fill=False, linestyle="--", edgecolor="#999999")
                    )
                    ax.text(
                        page * 0.01,
                        y + 0.4,
                        f"g{lane_index}: empty slot",
                        va="center",
                        fontsize=6,
                        color="#777777",
                    )
                    has_empty = True
                    widest = max(widest, page)
                    y += 1
                    continue
                spec = plan.specs[name]
                x0 = tensor.offset if tensor.block_stride else 0
                real = spec.unpadded_page_size_bytes
                page = spec.page_size_bytes
                color = COLORS.get(spec.type_name, OTHER)
                types_seen.setdefault(spec.type_name, color)
                draft = plan.config.is_draft_layer(name)
                has_draft = has_draft or draft
                ax.add_patch(
                    Rectangle(
                        (x0, y),
                        real,
                        0.8,
                        facecolor=color,
                        edgecolor="black" if draft else color,
                        linewidth=1.2 if draft else 0.3,
                        alpha=0.65 if draft else 0.9,
                    )
                )
                if page > real:
                    ax.add_patch(
                        Rectangle(
                            (x0 + real, y),
                            page - real,
                            0.8,
                            facecolor="#eeeeee",
                            edgecolor="#666666",
                            hatch="////",
                            linewidth=0.3,
                        )
                    )
                    has_padding = True
                ax.text(x0 + page * 0.01, y + 0.4, f"g{lane_index}: {_short(name)}", va="center", fontsize=6)
                widest = max(widest, x0 + page, tensor.block_stride)
                y += 1
        ticks.append((start + y - 1) / 2 + 0.4)
        labels.append(f"tensor {row}\n{format_size(tensor.size)}")
        y += 0.6
    ax.set_xlim(0, widest * 1.02)
    ax.set_ylim(y, -0.4)
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xticks([widest * i / 4 for i in range(5)])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_size(round(v))))
    ax.set_xlabel("bytes within one block of each tensor (page: real state, then padding)")
    handles = [Patch(facecolor=c, label=t) for t, c in types_seen.items()]
    if has_padding:
        handles.append(Patch(facecolor="#eeeeee", edgecolor="#666666", hatch="////", label="padding"))
    if has_empty:
        handles.append(Patch(fill=False, linestyle="--", edgecolor="#999999", label="empty slot"))
    if has_draft:
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=1.2, label="draft layer"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    more = f" (first {len(rows)} of {len(wp.tensors)} tensors)" if len(wp.tensors) > len(rows) else ""
    heading = title or "kvrules plan"
    fig.suptitle(
        f"{heading}\nworker {worker}: {len(wp.tensors)} tensors{more}, {sum(1 for g in wp.groups if g.layer_names)} "
        f"groups (lanes g0..), num_blocks {plan.num_blocks:,}, layout {wp.layout or '-'}",
        fontsize=9,
    )
    fig.subplots_adjust(left=0.1, right=0.82, top=1 - 0.9 / max(3.0, height), bottom=0.5 / max(3.0, height))
    out.parent.mkdir(parents=True, exist_ok=True)
    svg = out.suffix.lower() == ".svg"
    kwargs: dict[str, Any] = {"metadata": {"Date": None}} if svg else {"dpi": 100}
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: small, searchable, fast
        fig.savefig(out, **kwargs)
    return out
