"""A drawing of a plan's memory layout (``kvrules plan --picture layout.svg``), with matplotlib.

One row per KV-cache tensor of a worker, one lane per KV-cache group. A lane shows the page of
the group's layer that lives in that tensor: real bytes coloured by spec type, page padding
hatched, and an empty slot (a group shorter than the others) drawn as a dashed outline. The x
axis is the bytes of one block; a packed layout places each page at its offset in the block.
Kinds, draft marks and padding are the worker's group facts
(:func:`~kvrules.report.groups.group_facts`), the same the plan table and the summary print.

matplotlib is an optional dependency (``pip install kvrules[plot]``) imported only when drawing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvrules.errors import KVRulesError
from kvrules.plan import KVCacheTensor, Plan, WorkerPlan
from kvrules.report.groups import GroupFacts, LayerFacts, group_facts
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
PADDING = {"facecolor": "#eeeeee", "edgecolor": "#666666", "hatch": "////"}
EMPTY = {"fill": False, "linestyle": "--", "edgecolor": "#999999"}


class PictureError(KVRulesError):
    """The picture cannot be drawn: matplotlib is missing, or the file type is not supported."""


@dataclass(frozen=True)
class _Kit:
    """The matplotlib pieces a drawing uses (imported only when drawing)."""

    matplotlib: Any
    figure: Any
    canvas: Any
    patch: Any
    rectangle: Any
    formatter: Any


def _matplotlib() -> _Kit:
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch, Rectangle
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise PictureError(
            "drawing a picture needs matplotlib, which is not installed; install it with "
            "`pip install kvrules[plot]` (or `pip install matplotlib`)"
        ) from None
    return _Kit(matplotlib, Figure, FigureCanvasAgg, Patch, Rectangle, FuncFormatter)


@dataclass
class _Sheet:
    """The axes being drawn on and what has been drawn so far (for the axes and the legend)."""

    ax: Any
    rectangle: Any
    y: float = 0.0
    widest: int = 1
    ticks: list[float] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    types_seen: dict[str, str] = field(default_factory=dict)
    has_padding: bool = False
    has_empty: bool = False
    has_draft: bool = False


def _short(name: str, limit: int = 38) -> str:
    return name if len(name) <= limit else "..." + name[-(limit - 3) :]


Lane = list[LayerFacts | None]


def _lanes(tensor: KVCacheTensor, groups: tuple[GroupFacts, ...]) -> list[Lane]:
    """Per group with layers, the layers of that group living in ``tensor`` (``[None]`` if none)."""
    members = set(tensor.shared_by)
    lanes: list[Lane] = []
    for group in groups:
        if not group.layer_names:
            continue
        here: Lane = [layer for layer in group.layers if layer.name in members]
        lanes.append(here or [None])
    return lanes


def _check(plan: Plan, out: Path, worker: int) -> None:
    """Raise :class:`PictureError` for an unsupported file type or a worker the plan lacks."""
    if out.suffix.lower() not in FORMATS:
        raise PictureError(f"picture {out}: use a file ending in {', '.join(FORMATS)}")
    if not 0 <= worker < len(plan.workers):
        raise PictureError(
            f"picture: the plan has {len(plan.workers)} workers; worker {worker} does not exist"
        )


def _draw_empty(sheet: _Sheet, page: int, lane_index: int) -> None:
    """A dashed outline of ``page`` bytes: group ``lane_index`` has no layer in this tensor."""
    sheet.ax.add_patch(sheet.rectangle((0, sheet.y), page, 0.8, **EMPTY))
    sheet.ax.text(
        page * 0.01,
        sheet.y + 0.4,
        f"g{lane_index}: empty slot",
        va="center",
        fontsize=6,
        color="#777777",
    )
    sheet.has_empty = True
    sheet.widest = max(sheet.widest, page)
    sheet.y += 1


def _draw_layer(sheet: _Sheet, layer: LayerFacts, lane_index: int, tensor: KVCacheTensor) -> None:
    """The page of ``layer``: real bytes coloured by its kind, then its padding hatched."""
    x0 = tensor.offset if tensor.block_stride else 0
    real, page = layer.real_bytes, layer.page_bytes
    color = COLORS.get(layer.kind, OTHER)
    sheet.types_seen.setdefault(layer.kind, color)
    sheet.has_draft = sheet.has_draft or layer.draft
    sheet.ax.add_patch(
        sheet.rectangle(
            (x0, sheet.y),
            real,
            0.8,
            facecolor=color,
            edgecolor="black" if layer.draft else color,
            linewidth=1.2 if layer.draft else 0.3,
            alpha=0.65 if layer.draft else 0.9,
        )
    )
    if layer.padding_bytes > 0:
        sheet.ax.add_patch(
            sheet.rectangle((x0 + real, sheet.y), layer.padding_bytes, 0.8, **PADDING, linewidth=0.3)
        )
        sheet.has_padding = True
    sheet.ax.text(
        x0 + page * 0.01, sheet.y + 0.4, f"g{lane_index}: {_short(layer.name)}", va="center", fontsize=6
    )
    sheet.widest = max(sheet.widest, x0 + page, tensor.block_stride)
    sheet.y += 1


def _draw_tensor(sheet: _Sheet, row: int, tensor: KVCacheTensor, lanes: list[Lane], empty_page: int) -> None:
    """One row of the picture: a lane per group, then the tensor's tick label."""
    start = sheet.y
    for lane_index, lane in enumerate(lanes):
        for layer in lane:
            if layer is None:
                _draw_empty(sheet, empty_page, lane_index)
            else:
                _draw_layer(sheet, layer, lane_index, tensor)
    sheet.ticks.append((start + sheet.y - 1) / 2 + 0.4)
    sheet.labels.append(f"tensor {row}\n{format_size(tensor.size)}")
    sheet.y += 0.6


def _empty_page(tensor: KVCacheTensor, pages: dict[str, int]) -> int:
    """The width of an empty slot in ``tensor``: the largest page of the layers living there."""
    return max((pages[n] for n in tensor.shared_by if n in pages), default=0)


def _axes(sheet: _Sheet, formatter: Any) -> None:
    """Limits, tensor ticks on y, byte ticks on x."""
    ax, widest = sheet.ax, sheet.widest
    ax.set_xlim(0, widest * 1.02)
    ax.set_ylim(sheet.y, -0.4)
    ax.set_yticks(sheet.ticks)
    ax.set_yticklabels(sheet.labels, fontsize=7)
    ax.set_xticks([widest * i / 4 for i in range(5)])
    ax.xaxis.set_major_formatter(formatter(lambda v, _pos: format_size(round(v))))
    ax.set_xlabel("bytes within one block of each tensor (page: real state, then padding)")


def _legend(sheet: _Sheet, patch: Any) -> None:
    """One entry per kind drawn, then padding, empty slot and draft layer when drawn."""
    handles = [patch(facecolor=c, label=t) for t, c in sheet.types_seen.items()]
    if sheet.has_padding:
        handles.append(patch(**PADDING, label="padding"))
    if sheet.has_empty:
        handles.append(patch(**EMPTY, label="empty slot"))
    if sheet.has_draft:
        handles.append(patch(facecolor="white", edgecolor="black", linewidth=1.2, label="draft layer"))
    sheet.ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def _heading(plan: Plan, worker: int, shown: int, groups: tuple[GroupFacts, ...], title: str | None) -> str:
    """The two title lines: the caller's title, then the worker's tensors, groups and layout."""
    wp = plan.workers[worker]
    more = f" (first {shown} of {len(wp.tensors)} tensors)" if len(wp.tensors) > shown else ""
    lanes = sum(1 for g in groups if g.layer_names)
    return (
        f"{title or 'kvrules plan'}\nworker {worker}: {len(wp.tensors)} tensors{more}, {lanes} "
        f"groups (lanes g0..), num_blocks {plan.num_blocks:,}, layout {wp.layout or '-'}"
    )


def _save(kit: _Kit, fig: Any, out: Path) -> None:
    """Write ``fig`` to ``out``: SVG text stays text and carries no date; raster at 100 dpi."""
    out.parent.mkdir(parents=True, exist_ok=True)
    svg = out.suffix.lower() == ".svg"
    kwargs: dict[str, Any] = {"metadata": {"Date": None}} if svg else {"dpi": 100}
    with kit.matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: small, searchable, fast
        fig.savefig(out, **kwargs)


def _rows(wp: WorkerPlan, groups: tuple[GroupFacts, ...], max_rows: int) -> list[list[Lane]]:
    """The lanes of each drawn tensor (the first ``max_rows``)."""
    return [_lanes(tensor, groups) for tensor in wp.tensors[: max(max_rows, 0)]]


def draw_layout(
    plan: Plan, path: str | Path, *, worker: int = 0, title: str | None = None, max_rows: int = 32
) -> Path:
    """Draw worker ``worker``'s tensors of ``plan`` to ``path`` (``.svg``, ``.png`` or ``.pdf``).

    :raises PictureError: matplotlib missing, or an unsupported file type.
    """
    out = Path(path)
    _check(plan, out, worker)
    kit = _matplotlib()
    wp = plan.workers[worker]
    groups = group_facts(plan, worker)
    pages = {layer.name: layer.page_bytes for g in groups for layer in g.layers}
    rows = _rows(wp, groups, max_rows)
    per_row = [sum(len(lane) for lane in lanes) for lanes in rows] or [1]
    height = max(3.0, 1.6 + LANE * (sum(per_row) + len(rows)))
    fig = kit.figure(figsize=(12, height))
    kit.canvas(fig)
    sheet = _Sheet(fig.add_subplot(1, 1, 1), kit.rectangle)
    for row, lanes in enumerate(rows):
        tensor = wp.tensors[row]
        _draw_tensor(sheet, row, tensor, lanes, _empty_page(tensor, pages))
    _axes(sheet, kit.formatter)
    _legend(sheet, kit.patch)
    fig.suptitle(_heading(plan, worker, len(rows), groups, title), fontsize=9)
    fig.subplots_adjust(left=0.1, right=0.82, top=1 - 0.9 / height, bottom=0.5 / height)
    _save(kit, fig, out)
    return out
