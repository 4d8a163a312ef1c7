"""A drawing of a plan's memory layout (``kvrules plan --picture layout.svg``), with matplotlib.

One band per KV-cache tensor of a worker, one lane per KV-cache group. A lane shows the page of
the group's layer that lives in that tensor: real bytes coloured by spec type, page padding
hatched, and an empty slot (a group shorter than the others) drawn as a dashed outline. The x
axis is the bytes of one block; a packed layout places each page at its offset in the block.
Kinds, draft marks and padding are the worker's group facts
(:func:`~kvrules.report.groups.group_facts`), the same the plan table and the summary print.

Identical tensors (same size, offset and stride, and the same pages lane by lane) are drawn once,
as one band marked ``x N`` whose lanes name their layers as a span
(``model.layers.{0..44}.linear_attn``, :func:`~kvrules.report.names.span`). Every text is at
least :data:`MIN_TEXT_PX` pixels high when the image is shown :data:`SHOWN_WIDTH_PX` pixels wide.

matplotlib is an optional dependency (``pip install kvrules[plot]``) imported only when drawing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvrules.errors import KVRulesError
from kvrules.plan import KVCacheTensor, Plan, WorkerPlan
from kvrules.report.groups import GroupFacts, LayerFacts, group_facts
from kvrules.report.names import elide, span
from kvrules.units import format_size

#: the file types a picture can be written as (the ``--picture`` help and errors list these)
FORMATS = (".svg", ".png", ".pdf")
LANE = 0.24  # inches per lane
#: the figure's width in inches (SVG user units are points: 72 per inch)
WIDTH = 9.0
#: the width an image is judged at, and the least height of its text there, in pixels
SHOWN_WIDTH_PX = 1000
MIN_TEXT_PX = 10
#: the smallest font size in points that keeps :data:`MIN_TEXT_PX` (6.48 at 9 inches)
MIN_FONT = MIN_TEXT_PX * WIDTH * 72 / SHOWN_WIDTH_PX
#: the font sizes of lane, tick, legend and axis text, and of the title
FONT = max(8.0, MIN_FONT)
TITLE_FONT = FONT + 1
#: the most characters of a lane's layer names and of a band's tensor list
NAME_LIMIT = 52
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


Lane = list[LayerFacts | None]


def formats_text() -> str:
    """The supported file types in words: ``.svg, .png or .pdf``."""
    return f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}"


def check_format(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path`, when its suffix is one of :data:`FORMATS`.

    :raises PictureError: another suffix (naming the path and the formats).
    """
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise PictureError(f"picture {out}: use a file ending in {formats_text()}")
    return out


@dataclass
class _Band:
    """Identical tensors, drawn once: their indices and, per tensor, its lanes."""

    indices: list[int]
    tensor: KVCacheTensor
    lanes: list[list[Lane]]

    @property
    def label(self) -> str:
        """The band's tick label: which tensors, ``x N`` when several, and their size."""
        size = format_size(self.tensor.size)
        if len(self.indices) == 1:
            return f"tensor {self.indices[0]}\n{size}"
        return f"tensors {_ranges(self.indices)}\nx {len(self.indices)}, {size} each"

    def names(self, lane: int, slot: int) -> list[str]:
        """The names of the layers drawn at ``slot`` of ``lane``, one per tensor of the band."""
        return [layer.name for lanes in self.lanes if (layer := lanes[lane][slot]) is not None]


def _ranges(indices: list[int]) -> str:
    """``0-11`` or ``0-3,5,7-9``: ascending indices as ranges, elided past :data:`NAME_LIMIT`."""
    parts: list[str] = []
    start = previous = indices[0]
    for index in [*indices[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    return elide(",".join(parts), NAME_LIMIT // 2)


def _signature(tensor: KVCacheTensor, lanes: list[Lane]) -> tuple[object, ...]:
    """What two tensors share when they draw alike: size, placement and every page, lane by lane."""
    pages = tuple(
        tuple(
            None if layer is None else (layer.kind, layer.draft, layer.page_bytes, layer.padding_bytes)
            for layer in lane
        )
        for lane in lanes
    )
    return (tensor.size, tensor.offset if tensor.block_stride else 0, tensor.block_stride, pages)


def _bands(wp: WorkerPlan, groups: tuple[GroupFacts, ...]) -> list[_Band]:
    """The worker's tensors as bands of identical tensors, in the order of their first tensor."""
    seats = _seats(groups)
    lane_count = sum(1 for g in groups if g.layer_names)
    bands: dict[tuple[object, ...], _Band] = {}
    for index, tensor in enumerate(wp.tensors):
        lanes = _lanes(tensor, seats, lane_count)
        band = bands.setdefault(_signature(tensor, lanes), _Band([], tensor, []))
        band.indices.append(index)
        band.lanes.append(lanes)
    return list(bands.values())


#: where a layer is drawn: its lane, its place in its group, its facts
_Seat = tuple[int, int, LayerFacts]


def _seats(groups: tuple[GroupFacts, ...]) -> dict[str, _Seat]:
    """Every layer's seat; lanes number the groups that have layers."""
    lanes = (group for group in groups if group.layer_names)
    return {
        layer.name: (lane, place, layer)
        for lane, group in enumerate(lanes)
        for place, layer in enumerate(group.layers)
    }


def _lanes(tensor: KVCacheTensor, seats: dict[str, _Seat], lane_count: int) -> list[Lane]:
    """Per lane, the layers of its group living in ``tensor`` in group order (``[None]`` if none)."""
    here = sorted((seats[name] for name in tensor.shared_by if name in seats), key=lambda s: s[:2])
    lanes: list[Lane] = [[] for _ in range(lane_count)]
    for lane, _place, layer in here:
        lanes[lane].append(layer)
    return [lane or [None] for lane in lanes]


def _check(plan: Plan, out: Path, worker: int) -> None:
    """Raise :class:`PictureError` for an unsupported file type or a worker the plan lacks."""
    check_format(out)
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
        fontsize=FONT,
        color="#777777",
    )
    sheet.has_empty = True
    sheet.widest = max(sheet.widest, page)
    sheet.y += 1


def _draw_layer(
    sheet: _Sheet, layer: LayerFacts, lane_index: int, tensor: KVCacheTensor, names: list[str]
) -> None:
    """The page of ``layer``: real bytes coloured by its kind, then its padding hatched; the
    lane's text names ``names`` (the layers drawn there, one per tensor of the band)."""
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
        x0 + page * 0.01,
        sheet.y + 0.4,
        f"g{lane_index}: {span(names, NAME_LIMIT)}",
        va="center",
        fontsize=FONT,
    )
    sheet.widest = max(sheet.widest, x0 + page, tensor.block_stride)
    sheet.y += 1


def _draw_band(sheet: _Sheet, band: _Band, empty_page: int) -> None:
    """One band of the picture: a lane per group, then the band's tick label."""
    start = sheet.y
    for lane_index, lane in enumerate(band.lanes[0]):
        for slot, layer in enumerate(lane):
            if layer is None:
                _draw_empty(sheet, empty_page, lane_index)
            else:
                _draw_layer(sheet, layer, lane_index, band.tensor, band.names(lane_index, slot))
    sheet.ticks.append((start + sheet.y - 1) / 2 + 0.4)
    sheet.labels.append(band.label)
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
    ax.set_yticklabels(sheet.labels, fontsize=FONT)
    ax.set_xticks([widest * i / 4 for i in range(5)])
    ax.xaxis.set_major_formatter(formatter(lambda v, _pos: format_size(round(v))))
    ax.tick_params(axis="x", labelsize=FONT)
    ax.set_xlabel("bytes within one block of each tensor (page: real state, then padding)", fontsize=FONT)


def _left(sheet: _Sheet) -> float:
    """The left margin (a fraction of the width) that holds the longest tick-label line."""
    longest = max((len(line) for label in sheet.labels for line in label.split("\n")), default=0)
    return min(0.3, (longest * 0.62 * FONT + 14) / (WIDTH * 72))


def _legend(sheet: _Sheet, patch: Any) -> None:
    """One entry per kind drawn, then padding, empty slot and draft layer when drawn."""
    handles = [patch(facecolor=c, label=t) for t, c in sheet.types_seen.items()]
    if sheet.has_padding:
        handles.append(patch(**PADDING, label="padding"))
    if sheet.has_empty:
        handles.append(patch(**EMPTY, label="empty slot"))
    if sheet.has_draft:
        handles.append(patch(facecolor="white", edgecolor="black", linewidth=1.2, label="draft layer"))
    sheet.ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=FONT, frameon=False
    )


def _count(number: int, noun: str) -> str:
    """``1 tensor``, ``12 tensors``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _heading(
    plan: Plan, worker: int, bands: list[_Band], shown: int, groups: tuple[GroupFacts, ...], title: str | None
) -> str:
    """The title lines: the caller's title, the worker's tensors, groups and layout, and how
    identical tensors are drawn."""
    wp = plan.workers[worker]
    lanes = sum(1 for g in groups if g.layer_names)
    lines = [
        title or "kvrules plan",
        f"worker {worker}: {_count(len(wp.tensors), 'tensor')}, {_count(lanes, 'group')} (lanes g0..), "
        f"num_blocks {plan.num_blocks:,}, layout {wp.layout or '-'}",
    ]
    if len(bands) < len(wp.tensors):
        lines.append(f"{_count(len(bands), 'distinct tensor')}: identical ones drawn once, marked x N")
    if len(bands) > shown:
        lines.append(f"first {shown} of {len(bands)} distinct tensors drawn")
    return "\n".join(lines)


def _save(kit: _Kit, fig: Any, out: Path) -> None:
    """Write ``fig`` to ``out``: SVG text stays text and carries no date; raster at 100 dpi."""
    out.parent.mkdir(parents=True, exist_ok=True)
    svg = out.suffix.lower() == ".svg"
    kwargs: dict[str, Any] = {"metadata": {"Date": None}} if svg else {"dpi": 100}
    with kit.matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: small, searchable, fast
        fig.savefig(out, **kwargs)


def draw_layout(
    plan: Plan, path: str | Path, *, worker: int = 0, title: str | None = None, max_rows: int = 32
) -> Path:
    """Draw worker ``worker``'s tensors of ``plan`` to ``path`` (``.svg``, ``.png`` or ``.pdf``):
    identical tensors as one band marked ``x N``, at most ``max_rows`` bands.

    :raises PictureError: matplotlib missing, or an unsupported file type.
    """
    out = Path(path)
    _check(plan, out, worker)
    kit = _matplotlib()
    wp = plan.workers[worker]
    groups = group_facts(plan, worker)
    pages = {layer.name: layer.page_bytes for g in groups for layer in g.layers}
    bands = _bands(wp, groups)
    drawn = bands[: max(max_rows, 0)]
    per_band = [sum(len(lane) for lane in band.lanes[0]) for band in drawn] or [1]
    heading = _heading(plan, worker, bands, len(drawn), groups, title)
    top = 0.35 + TITLE_FONT * 1.3 / 72 * (heading.count("\n") + 1)
    height = max(3.0, top + 1.0 + LANE * (sum(per_band) + len(drawn)))
    fig = kit.figure(figsize=(WIDTH, height))
    kit.canvas(fig)
    sheet = _Sheet(fig.add_subplot(1, 1, 1), kit.rectangle)
    for band in drawn:
        _draw_band(sheet, band, _empty_page(band.tensor, pages))
    _axes(sheet, kit.formatter)
    _legend(sheet, kit.patch)
    fig.suptitle(heading, fontsize=TITLE_FONT, y=1 - 0.1 / height, va="top")
    fig.subplots_adjust(left=_left(sheet), right=0.78, top=1 - top / height, bottom=0.55 / height)
    _save(kit, fig, out)
    return out
