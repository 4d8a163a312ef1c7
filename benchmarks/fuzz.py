"""The long fuzz campaign (outside CI): the generators, runners and invariant checker of
``tests/fuzz`` on many more inputs, seeded.

Eight campaigns: the Python API with normal and with extreme values, mutated model files and
mutated Hugging Face configs through the command line (a forked child per input), faulty
plugins, models of up to 4,000 layers with one spec object per layer (model files and HF
configs, planned in-process), special files (FIFOs, devices, directories, broken links, sockets,
over-size sparse files) in every slot of every command that reads a file, and drawn values of
every environment variable kvrules reads (with a plugin that patches kvrules, so the strict and
autoload switches decide something). For each it counts ok / KVRulesError (exit 2) / other exception / hang (> 10 s) /
invariant broken (and, for plugins, wrong blame), and prints for every failing cause the first
reproducers, the first one shrunk. Input ``i`` of campaign ``c`` is generated from the seed
``"<seed>-<c>-<i>"``, so a run is reproducible and a single input can be replayed.

Run: ``.venv/bin/python benchmarks/fuzz.py`` (50,000 inputs, about 15 minutes on 2 cores),
``--quick`` (2,000 inputs, about a minute), ``--inputs N``, ``--seed S``, ``--jobs J``,
``--campaigns api-normal,plugins``, ``--replay plugins:129`` (one input again, shrunk when it
fails). Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz.api_cases import api_case, render_case, run_api_case, shrink
from fuzz.cli_cases import WARM_UP, hf_case, model_case, run_cli_case, show_cli_case, shrink_cli
from fuzz.distinct_cases import distinct_case, run_distinct_case, show_distinct, shrink_distinct
from fuzz.draw import generate
from fuzz.env_cases import env_case, run_env_case, show_env, shrink_env
from fuzz.forked import warm_up
from fuzz.outcome import DEFECTS, Outcome
from fuzz.plugin_cases import plugin_case, run_plugin_case, shrink_plugin_case
from fuzz.special_cases import run_special_case, show_special, shrink_special, special_case

Cause = tuple[str, str, str]


def _work() -> Path:
    """This process's folder for the files a command-line input writes."""
    if not _WORK:
        _WORK.append(Path(tempfile.mkdtemp(prefix="kvrules-fuzz-")))
    return _WORK[0]


_WORK: list[Path] = []


def _run_cli(case: Any) -> Outcome:
    return run_cli_case(case, _work())


def _shrink_cli(case: Any, run: Callable[[Any], Outcome], seconds: float) -> tuple[Any, Outcome]:
    return shrink_cli(case, run, seconds)


def _run_special(case: Any) -> Outcome:
    return run_special_case(case, _work())


def _run_env(case: Any) -> Outcome:
    return run_env_case(case, _work())


def _shrink_plugin(case: Any, run: Callable[[Any], Outcome], seconds: float) -> tuple[Any, Outcome]:
    return shrink_plugin_case(case, seconds)


@dataclass(frozen=True)
class Campaign:
    """One campaign: its generator and runner, and its share of the inputs."""

    title: str
    gen: Callable[..., Any]
    args: tuple[Any, ...]
    run: Callable[[Any], Outcome]
    shrink: Callable[[Any, Callable[[Any], Outcome], float], tuple[Any, Outcome]]
    show: Callable[[Any], str]
    share: float


CAMPAIGNS: dict[str, Campaign] = {
    "api-normal": Campaign(
        "API, normal values", api_case, ("normal",), run_api_case, shrink, render_case, 0.35
    ),
    "api-extreme": Campaign(
        "API, extreme values", api_case, ("extreme",), run_api_case, shrink, render_case, 0.35
    ),
    "model-files": Campaign(
        "model files via CLI", model_case, (), _run_cli, _shrink_cli, show_cli_case, 0.10
    ),
    "hf-configs": Campaign("HF configs via CLI", hf_case, (), _run_cli, _shrink_cli, show_cli_case, 0.06),
    "plugins": Campaign("faulty plugins", plugin_case, (), run_plugin_case, _shrink_plugin, json.dumps, 0.04),
    "distinct-specs": Campaign(
        "one spec object per layer",
        distinct_case,
        (),
        run_distinct_case,
        shrink_distinct,
        show_distinct,
        0.02,
    ),
    "special-files": Campaign(
        "special files via CLI", special_case, (), _run_special, shrink_special, show_special, 0.04
    ),
    "environment": Campaign("environment values", env_case, (), _run_env, shrink_env, show_env, 0.04),
}


@dataclass
class Tally:
    """Counts of one campaign (or one chunk of it) and the first inputs of each failing cause."""

    kinds: Counter[str] = field(default_factory=Counter)
    causes: Counter[Cause] = field(default_factory=Counter)
    first: dict[Cause, list[tuple[int, Outcome]]] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, index: int, outcome: Outcome, keep: int) -> None:
        self.kinds[outcome.kind] += 1
        if outcome.is_defect:
            self.causes[outcome.cause] += 1
            kept = self.first.setdefault(outcome.cause, [])
            if len(kept) < keep:
                kept.append((index, outcome))

    def merge(self, other: Tally, keep: int) -> None:
        self.kinds.update(other.kinds)
        self.causes.update(other.causes)
        self.seconds += other.seconds
        for cause, kept in other.first.items():
            mine = self.first.setdefault(cause, [])
            mine.extend(kept)
            mine.sort(key=lambda item: item[0])
            del mine[keep:]


def seed_of(seed: str, name: str, index: int) -> str:
    """The seed of input ``index`` of campaign ``name``."""
    return f"{seed}-{name}-{index}"


def run_chunk(name: str, seed: str, indices: range, keep: int) -> Tally:
    """Run inputs ``indices`` of campaign ``name`` (in a worker process)."""
    logging.disable(logging.CRITICAL)
    campaign = CAMPAIGNS[name]
    tally = Tally()
    started = time.perf_counter()
    for index in indices:
        case = generate(campaign.gen, seed_of(seed, name, index), *campaign.args)
        tally.add(index, campaign.run(case), keep)
    tally.seconds = time.perf_counter() - started
    return tally


def chunks(count: int, size: int) -> list[range]:
    """``range(count)`` in pieces of ``size``."""
    return [range(start, min(count, start + size)) for start in range(0, count, size)]


def run_campaign(pool: Any, name: str, count: int, seed: str, keep: int) -> tuple[Tally, float]:
    """All ``count`` inputs of campaign ``name`` over the pool's workers; progress to stderr."""
    total = Tally()
    started = time.perf_counter()
    size = max(1, min(500, count // 20 or 1))
    work = partial(_chunk_job, name, seed, keep)
    done = 0
    for tally in pool.imap_unordered(work, chunks(count, size)):
        total.merge(tally, keep)
        done += sum(tally.kinds.values())
        defects = sum(tally_count for kind, tally_count in total.kinds.items() if kind in DEFECTS)
        print(
            f"[{name}] {done}/{count} inputs, {defects} failing, {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
    return total, time.perf_counter() - started


def _chunk_job(name: str, seed: str, keep: int, indices: range) -> Tally:
    return run_chunk(name, seed, indices, keep)


def shrunk(name: str, seed: str, index: int, seconds: float) -> tuple[str, Outcome]:
    """The input ``index`` of campaign ``name``, shrunk, as text; and how it ends now."""
    campaign = CAMPAIGNS[name]
    case = generate(campaign.gen, seed_of(seed, name, index), *campaign.args)
    small, outcome = campaign.shrink(case, campaign.run, seconds)
    return campaign.show(small), outcome


def raw(name: str, seed: str, index: int, limit: int = 400) -> str:
    """The input ``index`` of campaign ``name`` as text, cut at ``limit`` characters."""
    campaign = CAMPAIGNS[name]
    text = campaign.show(generate(campaign.gen, seed_of(seed, name, index), *campaign.args))
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


COLUMNS = ("ok", "error", "other", "hang", "broken", "blame")
HEADINGS = (
    "ok",
    "KVRulesError / exit 2",
    "other exception",
    "hang > 10 s",
    "invariant broken",
    "wrong blame",
)


def table(rows: Iterable[tuple[str, int, float, Tally]]) -> str:
    """The counts as a Markdown table."""
    lines = [
        "| campaign | inputs | seconds | " + " | ".join(HEADINGS) + " |",
        "|---|---|---|" + "---|" * len(HEADINGS),
    ]
    for title, count, seconds, tally in rows:
        cells = " | ".join(f"{tally.kinds.get(k, 0):,}" for k in COLUMNS)
        lines.append(f"| {title} | {count:,} | {seconds:.0f} | {cells} |")
    return "\n".join(lines)


def report_causes(name: str, tally: Tally, seed: str, budget: float, examples: int) -> list[str]:
    """One paragraph per failing cause: count, the first input shrunk, the next ones as they are."""
    out = []
    causes = sorted(tally.causes.items(), key=lambda item: (-item[1], item[0]))
    for (kind, error_type, where), count in causes:
        kept = tally.first[(kind, error_type, where)]
        index, outcome = kept[0]
        text, again = shrunk(name, seed, index, budget / max(1, len(causes)))
        out.append(f"- **{kind}** `{error_type}` at `{where or '-'}`: {count} input(s)")
        out.append(f"  - first: input {index}: {again.detail or outcome.detail}")
        out.append(f"    reproducer (shrunk): `{text}`")
        for other, later in kept[1:examples]:
            out.append(f"  - input {other}: {later.detail[:200]}")
            out.append(f"    reproducer: `{raw(name, seed, other)}`")
    return out


def replay(which: str, seed: str, seconds: float) -> int:
    """Print input ``CAMPAIGN:INDEX``, how it ends, and (when it fails) its shrunk form."""
    name, _, index = which.partition(":")
    if name not in CAMPAIGNS or not index.isdigit():
        raise SystemExit(f"--replay {which!r}: give CAMPAIGN:INDEX, CAMPAIGN one of {', '.join(CAMPAIGNS)}")
    logging.disable(logging.CRITICAL)
    warm_up(WARM_UP)
    campaign = CAMPAIGNS[name]
    case = generate(campaign.gen, seed_of(seed, name, int(index)), *campaign.args)
    outcome = campaign.run(case)
    print(
        f"input: {campaign.show(case)}\noutcome: {outcome.kind} {outcome.error_type} {outcome.where}: {outcome.detail}"
    )
    if outcome.is_defect:
        text, again = shrunk(name, seed, int(index), seconds)
        print(
            f"shrunk: {text}\nshrunk outcome: {again.kind} {again.error_type} {again.where}: {again.detail}"
        )
    return 0


def counts_for(total: int, names: list[str]) -> dict[str, int]:
    """Each campaign's number of inputs: its share of ``total`` (the shares of ``names``)."""
    shares = {n: CAMPAIGNS[n].share for n in names}
    whole = sum(shares.values())
    return {n: max(1, round(total * s / whole)) for n, s in shares.items()}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", default="0", help="campaign seed (default 0)")
    parser.add_argument(
        "--inputs", type=int, default=None, help="inputs in all (default 50,000; --quick 2,000)"
    )
    parser.add_argument("--quick", action="store_true", help="2,000 inputs: a quick look")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--campaigns", default=",".join(CAMPAIGNS), help="comma-separated: " + ", ".join(CAMPAIGNS)
    )
    parser.add_argument("--examples", type=int, default=3, help="reproducers shown per cause (default 3)")
    parser.add_argument(
        "--replay",
        metavar="CAMPAIGN:INDEX",
        help="run one input again (e.g. plugins:129) and print it, shrunk when it fails",
    )
    parser.add_argument(
        "--shrink-seconds", type=float, default=40, help="shrinking budget per campaign (default 40)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = [n.strip() for n in args.campaigns.split(",") if n.strip()]
    unknown = [n for n in names if n not in CAMPAIGNS]
    if unknown:
        raise SystemExit(f"unknown campaign(s) {', '.join(unknown)}; choose from {', '.join(CAMPAIGNS)}")
    if args.replay:
        return replay(args.replay, args.seed, args.shrink_seconds)
    total = args.inputs or (2_000 if args.quick else 50_000)
    counts = counts_for(total, names)
    logging.disable(logging.CRITICAL)
    started = time.perf_counter()
    warm_up(WARM_UP)  # before the workers fork: every one starts warm
    rows, details = [], []
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for name in names:
            tally, seconds = run_campaign(pool, name, counts[name], args.seed, args.examples)
            rows.append((CAMPAIGNS[name].title, counts[name], seconds, tally))
            details.append((name, tally))
    print(f"kvrules fuzz campaign: seed {args.seed!r}, {total:,} inputs, {args.jobs} jobs\n")
    print(table(rows))
    print(f"\nrun time: {time.perf_counter() - started:.0f} s (before shrinking)\n")
    for name, tally in details:
        if tally.causes:
            print(f"### {CAMPAIGNS[name].title}: failures by cause\n")
            print("\n".join(report_causes(name, tally, args.seed, args.shrink_seconds, args.examples)))
            print()
    print(f"total run time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
