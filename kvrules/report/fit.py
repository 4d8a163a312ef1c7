"""Text of a ``kvrules fit`` report (:class:`kvrules.sizing.fit.FitReport`)."""

from __future__ import annotations

from kvrules.report.tables import table
from kvrules.sizing.fit import FitReport, SetAnswer
from kvrules.units import format_size


def _size(value: int) -> str:
    return format_size(value) if value >= 0 else f"-{format_size(-value)}"


def _billions(count: int) -> str:
    return f"{count / 1e9:.2f} B"


def _answer_cells(answer: SetAnswer) -> list[object]:
    """One strategy set's row of the answer table."""
    if answer.plan is None:  # it does not fit: no plan
        longest = f"{answer.max_model_len_fits:,}" if answer.max_model_len_fits else "-"
        return [answer.strategy_set, "no", "-", longest, "-"]
    return [
        answer.strategy_set,
        "yes",
        f"{answer.max_concurrency:.2f}x",
        f"{answer.max_model_len_fits:,}",
        f"{answer.plan.capacity_tokens:,}",
    ]


def _runtime_line(report: FitReport) -> str:
    runtime = report.runtime
    parts = ", ".join(f"{name.replace('_', ' ')} {format_size(b)}" for name, b in runtime.components.items())
    label = "estimate" if runtime.estimated else "given"
    return f"{format_size(runtime.total_bytes)} ({label}: {parts})"


def render_fit(report: FitReport) -> str:
    """The report as text: the memory per GPU, one row per strategy set, the nearest settings
    that fit (when the first set's answer is no) and the notes."""
    o = report.options
    gpu = report.gpu
    where = (
        f"{gpu.name} ({format_size(gpu.total_bytes)}, {gpu.kind} figure)"
        if gpu.name
        else format_size(gpu.total_bytes)
    )
    draft = f" + draft {report.draft}" if report.draft else ""
    length = o.max_model_len or 0
    lines = [
        f"kvrules fit: {report.model}{draft} on {where}, TP {o.tp}, PP {o.pp}",
        "",
        f"  parameters        {_billions(report.params.total)} ({_billions(report.loaded_params)} loaded"
        + (f"; draft {_billions(report.draft_params.total)}" if report.draft_params else "")
        + ")",
        f"  usable per GPU    {format_size(report.usable_bytes)} ({o.gpu_memory_utilization:g} x {format_size(gpu.total_bytes)})",
        f"  weights per GPU   {format_size(report.weights_bytes_per_gpu)}",
        f"  runtime per GPU   {_runtime_line(report)}",
        f"  KV cache per GPU  {_size(report.kv_cache_bytes_per_gpu)}",
        "",
        f"  requests of {length:,} tokens (max_num_seqs {o.max_num_seqs}, max_num_batched_tokens "
        f"{o.max_num_batched_tokens:,}, KV cache {o.kv_cache_dtype}):",
        table(
            ["strategy set", "fits", "max concurrency", "longest request", "KV tokens"],
            [_answer_cells(a) for a in report.answers],
            indent="    ",
        ),
    ]
    reasons = [(a.strategy_set, a.reason) for a in report.answers if not a.fits and a.reason]
    if reasons and len({why for _, why in reasons}) == 1 and len(reasons) == len(report.answers):
        lines.append(f"    does not fit: {reasons[0][1]}")
    else:
        lines += [f"    {name}: {why}" for name, why in reasons]
    if not report.fits:
        lines += [
            "",
            "nearest settings that fit:"
            if report.nearest
            else "no nearby setting fits (tried TP 1/2/4/8, PP 2/4 at TP 8, fp8 weights, fp8 KV, a shorter length, no draft)",
        ]
        if report.nearest:
            headers = ["change", "weights/GPU", "KV cache/GPU"] + [f"{s}: concurrency" for s in o.strategies]
            rows = []
            for alt in report.nearest:
                r = alt.report
                cells: list[object] = [
                    alt.change,
                    format_size(r.weights_bytes_per_gpu),
                    _size(r.kv_cache_bytes_per_gpu),
                ]
                cells += [f"{a.max_concurrency:.2f}x" if a.fits else "no" for a in r.answers]
                rows.append(cells)
            lines.append(table(headers, rows))
    if report.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in report.notes]
    return "\n".join(lines)


__all__ = ["render_fit"]
