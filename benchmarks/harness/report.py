"""Medians over repeats, the ratio to greenhttp, and the JSON + markdown output."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .scenarios import CLIENTS, Scenario

METRICS = ("rps", "p50_ms", "p99_ms", "max_ms", "cpu_us_per_req", "maxrss_kb")
DOC_START = "<!-- benchmark-table:start -->"
DOC_END = "<!-- benchmark-table:end -->"


@dataclass
class Row:
    """One client in one scenario: its runs and what the table shows of them."""

    client: str
    n: int = 0  # measured requests per run
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok_runs(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r.get("status") == "ok"]

    @property
    def status(self) -> str:
        if self.ok_runs:
            return "ok"
        return str(self.runs[0]["status"]) if self.runs else "skipped"

    @property
    def reason(self) -> str:
        bad = [r for r in self.runs if r.get("status") != "ok"]
        return str(bad[0].get("reason", "")) if bad else ""

    def median(self) -> dict[str, float]:
        ok = self.ok_runs
        return {m: statistics.median(float(r[m]) for r in ok) for m in METRICS} if ok else {}

    @property
    def errors(self) -> int:
        return sum(int(r.get("errors", 0)) for r in self.ok_runs)


def ratio(row: Row, base: Row | None) -> float | None:
    """requests/s of ``row`` over the baseline's (greenhttp): >1 means faster."""
    if base is None or not row.ok_runs or not base.ok_runs:
        return None
    base_rps = base.median()["rps"]
    return row.median()["rps"] / base_rps if base_rps else None


def to_json(meta: dict[str, Any], results: list[tuple[Scenario, str, list[Row]]]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for scenario, baseline, rows in results:
        base = next((r for r in rows if r.client == baseline), None)
        out.append({
            "name": scenario.name,
            "title": scenario.title,
            "protocol": scenario.protocol,
            "path": scenario.path,
            "concurrency": scenario.concurrency,
            "connections": scenario.connections,
            "baseline": baseline,
            "clients": [
                {
                    "client": row.client,
                    "label": CLIENTS[row.client].label,
                    "status": row.status,
                    "reason": row.reason,
                    "n": row.n,
                    "errors": row.errors,
                    "median": row.median(),
                    "ratio_to_baseline": ratio(row, base),
                    "runs": row.runs,
                }
                for row in rows
            ],
        })
    return {"meta": meta, "scenarios": out}


def _num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def markdown(data: dict[str, Any]) -> str:
    meta = data["meta"]
    lines = [
        f"Measured {meta['date']} on {meta['machine']}; {meta['pinning']}.",
        *([f"Loopback: {meta['network']}."] if meta.get("network") else []),
        f"Mode: {meta['mode']}, {meta['repeats']} interleaved repeat(s), medians shown.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
        "",
        "*vs base*: requests/s divided by the baseline's (greenhttp unless `--baseline` "
        "says otherwise); above 1 is faster. CPU is user+sys of the client process "
        "during the measured phase; RSS is the client's peak.",
    ]
    for sc in data["scenarios"]:
        lines += [
            "",
            f"### `{sc['name']}`: {sc['title']}",
            "",
            f"Baseline: `{sc['baseline']}`.",
            "",
            "| client | req/s | vs base | p50 ms | p99 ms | max ms | CPU µs/req "
            "| peak RSS MiB | requests/run | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in sc["clients"]:
            if c["status"] != "ok":
                lines.append(f"| {c['label']} | {c['status']}: {c['reason']} "
                             "| | | | | | | | |")
                continue
            m, r = c["median"], c["ratio_to_baseline"]
            lines.append(
                f"| {c['label']} | {_num(m['rps'])} | {'' if r is None else f'{r:.2f}×'} "
                f"| {_num(m['p50_ms'], 2)} | {_num(m['p99_ms'], 2)} | {_num(m['max_ms'], 1)} "
                f"| {_num(m['cpu_us_per_req'], 1)} | {_num(m['maxrss_kb'] / 1024, 1)} "
                f"| {_num(c['n'])} | {c['errors']} |"
            )
    return "\n".join(lines) + "\n"


def write(out_dir: Path, data: dict[str, Any]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "latest.json", out_dir / "latest.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path.write_text("# greenhttp benchmark: latest run\n\n" + markdown(data))
    return json_path, md_path


def update_doc(doc: Path, table: str) -> bool:
    """Replace the marked section of ``doc`` with ``table``; False if no markers."""
    text = doc.read_text() if doc.exists() else ""
    pattern = re.compile(re.escape(DOC_START) + ".*?" + re.escape(DOC_END), re.S)
    if not pattern.search(text):
        return False
    doc.write_text(pattern.sub(lambda _: f"{DOC_START}\n{table}{DOC_END}", text, count=1))
    return True
