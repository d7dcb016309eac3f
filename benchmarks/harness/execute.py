"""Run one client runner in its own process group and read its one JSON line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from .scenarios import NODE_DIR, ClientDef
from .server import preexec_for

NPM_TIMEOUT_S = 300


def _kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def run_client(
    client: ClientDef, spec: dict[str, Any], cpu: int | None, timeout_s: float
) -> dict[str, Any]:
    """Run ``client`` on ``spec``; always returns a dict with ``status``.

    ``status`` is ``ok`` (the measurements are in the dict), ``skipped`` or
    ``failed`` (``reason`` says why). The process is killed with its whole
    group if it outlives ``timeout_s``.
    """
    reason = client.unavailable()
    if reason is not None:
        return {"status": "skipped", "reason": reason}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        client.command(json.dumps(spec)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(client.script.parent),
        start_new_session=True,
        preexec_fn=preexec_for(cpu),
    )
    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate(timeout=10)
            return {"status": "failed", "reason": f"timed out after {timeout_s:.0f} s"}
    finally:
        _kill_group(proc)
    result = _last_json(stdout)
    if result is None:
        return {"status": "failed", "reason": f"exit {proc.returncode}: {_tail(stderr)}"}
    if "skipped" in result:
        return {"status": "skipped", "reason": str(result["skipped"])}
    if proc.returncode != 0:
        return {"status": "failed", "reason": f"exit {proc.returncode}: {_tail(stderr)}"}
    if result.get("requests", 0) == 0:
        why = result.get("first_error") or ("timed out" if result.get("timed_out") else "none")
        return {"status": "failed", "reason": f"no request succeeded: {why}"}
    result["status"] = "ok"
    return result


def ensure_undici(log: Any) -> None:
    """Install undici@7 into benchmarks/.node when node and npm exist but it does not."""
    if (NODE_DIR / "node_modules" / "undici" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        return
    NODE_DIR.mkdir(exist_ok=True)
    package = Path(NODE_DIR / "package.json")
    if not package.exists():
        package.write_text('{"private": true, "type": "module"}\n')
    log("installing undici@7 into benchmarks/.node (npm) ...")
    try:
        subprocess.run(
            [npm, "install", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund", "undici@7"],
            check=True, capture_output=True, timeout=NPM_TIMEOUT_S,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        log(f"npm install undici@7 failed ({exc}); the undici rows will be skipped")
