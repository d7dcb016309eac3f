"""The request options are typed: mypy checks calls against them (issue 12).

``Dispatcher.request()`` and its siblings, and the module-level functions,
annotate their keyword options with the TypedDicts of
``greenhttp/_core/option_types.py`` (PEP 692). The sample below is
type-checked with mypy's API: every line marked ``# E: text`` must get an
error containing ``text``, no other line may get one, and every
``reveal_type`` marked ``# R: type`` must reveal exactly that type.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

LIB = Path(__file__).resolve().parent.parent / "lib"

SAMPLE = textwrap.dedent(
    '''
    from __future__ import annotations

    import io
    from urllib.parse import urlsplit

    import greenhttp
    from greenhttp import (
        AbortController,
        Dispatcher,
        PipelineOptions,
        RequestOptions,
        ResponseData,
        UpgradeOptions,
    )
    from greenhttp._core.option_types import Unpack


    def correct(client: greenhttp.Client, agent: greenhttp.Agent, d: Dispatcher) -> None:
        r = client.request(
            "/",
            "POST",
            headers={"content-type": "text/plain", "x-n": 1, "x-many": ["a", "b"]},
            body=b"payload",
            query={"q": 1, "tags": ["a", "b"]},
            headers_timeout=5,
            body_timeout=1.5,
            idempotent=False,
            blocking=True,
            reset=None,
            expect_continue=False,
            signal=AbortController().signal,
            on_info=lambda info: None,
            response_headers="raw",
            high_water_mark=1024,
            opaque={"any": "thing"},
        )
        reveal_type(r)  # R: ResponseData
        reveal_type(client.request("/", callback=lambda err, data: None))  # R: None
        client.request("/", headers=[("a", "b")], body=iter([b"a", b"b"]))
        client.request("/", headers=["a", "b"], body=io.BytesIO(b"x"))
        client.request("/", body=greenhttp.Blob([b"x"], type="text/plain"))
        agent.request("/", origin="http://127.0.0.1:8080", max_redirections=2, retry_options={"max_retries": 1})
        agent.request("/", origin=urlsplit("http://127.0.0.1:8080"), dns={"affinity": 6}, allow_h2=False)
        reveal_type(d.stream("/", factory=lambda data: io.BytesIO()))  # R: StreamData
        reveal_type(d.upgrade("/", protocol="websocket", signal=None))  # R: UpgradeData
        reveal_type(d.connect("example.com:443", headers={"a": "b"}))  # R: ConnectData
        reveal_type(greenhttp.request("http://127.0.0.1/", method="PUT", body="text", dispatcher=agent))  # R: ResponseData
        reveal_type(greenhttp.request(urlsplit("http://127.0.0.1/"), callback=print))  # R: None
        reveal_type(greenhttp.stream("http://127.0.0.1/", lambda data: io.BytesIO(), path="/x"))  # R: StreamData
        reveal_type(greenhttp.upgrade("http://127.0.0.1/", protocol="websocket"))  # R: UpgradeData
        reveal_type(greenhttp.connect("http://127.0.0.1:3128/", path="example.com:443"))  # R: ConnectData
        reveal_type(d.pipeline("/", "PUT", handler=lambda data: data.body, high_water_mark=1))  # R: PipelineDuplex
        reveal_type(agent.pipeline("/", handler=lambda data: data.body, origin="http://127.0.0.1"))  # R: PipelineDuplex
        reveal_type(greenhttp.pipeline("http://127.0.0.1/", lambda data: data.body, method="PUT"))  # R: PipelineDuplex


    def forwarding(client: greenhttp.Client, **options: Unpack[RequestOptions]) -> ResponseData:
        return client.request("/", **options)


    def dicts() -> None:
        ok: RequestOptions = {"headers_timeout": 1.0, "on_info": print}
        also: UpgradeOptions = {"body": b"", "opaque": 1}
        pipe: PipelineOptions = {"high_water_mark": 1}
        wrong: RequestOptions = {"headers_timeot": 1.0}  # E: Extra key "headers_timeot"
        no_body: PipelineOptions = {"body": b""}  # E: Extra key "body"
        bad: RequestOptions = {"headers_timeout": "5"}  # E: TypedDict item "headers_timeout" has type "float | None"


    def wrong(client: greenhttp.Client, d: Dispatcher) -> None:
        client.request("/", methd="GET")  # E: Unexpected keyword argument "methd"
        # A value of the wrong type: mypy names no option for an overloaded call, but
        # the argument types it lists show which one (the rest is as in correct()).
        client.request("/", headers_timeout="5")  # E: matches argument types "str", "str"
        client.request("/", body_timeout=[1])  # E: matches argument types "str", "list[int]"
        client.request("/", response_headers="cooked")  # E: matches argument types "str", "str"
        client.request("/", headers=object())  # E: matches argument types "str", "object"
        client.request("/", body={"a": 1}.items)  # E: matches argument types "str", "Callable[
        client.request("/", idempotent="yes")  # E: matches argument types "str", "str"
        client.request("/", signal=object())  # E: matches argument types "str", "object"
        client.request("/", callback=1)  # E: No overload variant
        client.request()  # E: require at least one argument
        d.upgrade("/", on_info=print)  # E: Unexpected keyword argument "on_info"
        d.connect("example.com:443", high_water_mark=1)  # E: Unexpected keyword argument "high_water_mark"
        d.stream("/", factory=print, throw_on_error=True)  # E: Unexpected keyword argument "throw_on_error"
        greenhttp.request("http://127.0.0.1/", bodyy=b"")  # E: Unexpected keyword argument "bodyy"
        greenhttp.request("http://127.0.0.1/", origin="http://x")  # E: Unexpected keyword argument "origin"
        greenhttp.request(42)  # E: No overload variant
        greenhttp.connect("http://127.0.0.1:3128/", method="GET")  # E: Unexpected keyword argument "method"
        d.pipeline("/", handler=print, body=b"x")  # E: Unexpected keyword argument "body"
        d.pipeline("/", handler=print, headers_timeout="5")  # E: Argument "headers_timeout" to "pipeline"
        greenhttp.pipeline("http://127.0.0.1/", print, methd="PUT")  # E: Unexpected keyword argument "methd"
    '''
)


def _reveals(note: str, want: str) -> bool:
    """Whether mypy's ``Revealed type is "..."`` note names ``want`` (a class, or None)."""
    revealed = note.removeprefix("note: Revealed type is ").strip('"')
    if want == "None":
        return revealed == "None"
    # A class is revealed by its full name; a NamedTuple as tuple[..., fallback=full name].
    return re.fullmatch(rf"(tuple\[.*, fallback=)?greenhttp\.[\w.]*\b{want}\]?", revealed) is not None


def _expected(marker: str) -> dict[int, str]:
    out = {}
    for number, line in enumerate(SAMPLE.splitlines(), start=1):
        if (m := re.search(rf"# {marker}: (.+)$", line)) is not None:
            out[number] = m.group(1).strip()
    return out


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[str]]:
    """Type-check SAMPLE against the library in lib/; the messages of each of its lines."""
    tmp = tmp_path_factory.mktemp("typing")
    sample = tmp / "sample.py"
    sample.write_text(SAMPLE, encoding="utf-8")
    config = tmp / "mypy.ini"
    # The library is analysed from lib/ (its own errors are the lint's business, not this test's).
    config.write_text(f"[mypy]\nmypy_path = {LIB}\nfollow_imports = silent\n", encoding="utf-8")
    stdout, stderr, status = api.run(
        [
            "--config-file", str(config),
            "--cache-dir", str(tmp / "cache"),
            "--python-version", "3.11",
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            "--show-error-codes",
            str(sample),
        ]
    )
    assert status in (0, 1), stderr
    by_line: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = re.match(r"(?P<path>.+?):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$", line)
        assert m is not None, line
        assert Path(m["path"]).name == "sample.py", f"a message about another file: {line}"
        by_line.setdefault(int(m["line"]), []).append(f"{m['kind']}: {m['text']}")
    return by_line


def test_correct_calls_type_check(mypy_output: dict[int, list[str]]) -> None:
    expected = _expected("E")
    unexpected = {
        number: [msg for msg in msgs if msg.startswith("error:")]
        for number, msgs in mypy_output.items()
        if number not in expected
    }
    unexpected = {number: msgs for number, msgs in unexpected.items() if msgs}
    assert unexpected == {}, "\n".join(
        f"{number}: {SAMPLE.splitlines()[number - 1].strip()}\n    {msgs}" for number, msgs in unexpected.items()
    )


def test_wrong_keywords_and_types_are_errors(mypy_output: dict[int, list[str]]) -> None:
    expected = _expected("E")
    assert len(expected) >= 15
    missing = {
        number: (text, mypy_output.get(number, []))
        for number, text in expected.items()
        if not any(msg.startswith("error:") and text in msg for msg in mypy_output.get(number, []))
    }
    assert missing == {}


def test_results_are_typed(mypy_output: dict[int, list[str]]) -> None:
    expected = _expected("R")
    assert len(expected) >= 10
    revealed = {
        number: [msg for msg in mypy_output.get(number, []) if msg.startswith("note: Revealed type is")]
        for number in expected
    }
    wrong = {
        number: (want, revealed[number])
        for number, want in expected.items()
        if len(revealed[number]) != 1 or not _reveals(revealed[number][0], want)
    }
    assert wrong == {}
