"""WHATWG Headers semantics of greenhttp's Headers (sans-IO)."""

from __future__ import annotations

import pytest

from greenhttp._core.fetch_headers import Headers, is_token


class TestConstruction:
    def test_empty(self) -> None:
        h = Headers()
        assert list(h) == []
        assert len(h) == 0
        assert h.get("anything") is None
        assert Headers(None) == h

    def test_from_dict_with_str_and_list_values(self) -> None:
        h = Headers({"Content-Type": "text/plain", "X-Multi": ["a", "b"]})
        assert h.get("content-type") == "text/plain"
        assert h.get("x-multi") == "a, b"
        assert list(h) == [("content-type", "text/plain"), ("x-multi", "a, b")]

    def test_from_pairs(self) -> None:
        h = Headers([("A", "1"), ("a", "2"), ("B", "3")])
        assert h.get("A") == "1, 2"
        assert h.get("b") == "3"

    def test_from_list_of_lists_and_generator(self) -> None:
        h = Headers([["a", "1"]])
        assert h.get("a") == "1"
        h2 = Headers((n, v) for n, v in [("x", "y")])
        assert h2.get("x") == "y"

    def test_from_headers_is_a_copy(self) -> None:
        original = Headers({"a": "1"})
        copy = Headers(original)
        copy.append("a", "2")
        assert original.get("a") == "1"
        assert copy.get("a") == "1, 2"

    def test_set_cookie_from_dict_list(self) -> None:
        h = Headers({"set-cookie": ["a=1", "b=2"]})
        assert h.get_set_cookie() == ["a=1", "b=2"]

    @pytest.mark.parametrize("bad", [[("a",)], [("a", "b", "c")], ["ab"], [b"ab"], [5]])
    def test_pairs_must_have_two_items(self, bad: list) -> None:
        with pytest.raises(TypeError, match="pair"):
            Headers(bad)

    @pytest.mark.parametrize("bad", ["a: b", b"a: b", 42])
    def test_init_rejects_scalars(self, bad: object) -> None:
        with pytest.raises(TypeError, match="Headers init"):
            Headers(bad)  # type: ignore[arg-type]

    def test_invalid_value_type_in_dict(self) -> None:
        with pytest.raises(TypeError, match="int"):
            Headers({"content-length": 5})  # type: ignore[dict-item]

    def test_bytes_names_and_values_are_latin1(self) -> None:
        h = Headers([(b"X-Bin", b"caf\xe9")])
        assert h.get("x-bin") == "caf\u00e9"


class TestMethods:
    def test_append_combines_with_comma_space(self) -> None:
        h = Headers()
        h.append("Accept", "text/html")
        h.append("ACCEPT", "application/json")
        assert h.get("accept") == "text/html, application/json"

    def test_set_replaces_all_values(self) -> None:
        h = Headers([("a", "1"), ("a", "2")])
        h.set("A", "3")
        assert h.get("a") == "3"
        h.set("new", "x")
        assert h.get("new") == "x"

    def test_get_absent_is_none_and_empty_value_is_empty_string(self) -> None:
        h = Headers({"empty": ""})
        assert h.get("missing") is None
        assert h.get("empty") == ""

    def test_has_and_delete_are_case_insensitive(self) -> None:
        h = Headers({"X-Token": "t"})
        assert h.has("x-token")
        assert h.has("X-TOKEN")
        h.delete("X-TOKEN")
        assert not h.has("x-token")
        h.delete("x-token")  # deleting an absent name is fine
        assert len(h) == 0

    def test_get_set_cookie_keeps_values_separate(self) -> None:
        h = Headers()
        h.append("Set-Cookie", "a=1, b")
        h.append("set-cookie", "c=2")
        assert h.get_set_cookie() == ["a=1, b", "c=2"]
        assert h.get("set-cookie") == "a=1, b, c=2"

    def test_get_set_cookie_is_empty_list_when_absent_and_a_copy(self) -> None:
        h = Headers()
        assert h.get_set_cookie() == []
        h.append("set-cookie", "a=1")
        got = h.get_set_cookie()
        got.append("mutated")
        assert h.get_set_cookie() == ["a=1"]


class TestValidation:
    @pytest.mark.parametrize("name", ["", "a b", "a:b", "a\r", "caf\u00e9", "(x)", "a\x00"])
    def test_invalid_names_raise_type_error_naming_the_name(self, name: str) -> None:
        h = Headers()
        for call in (
            lambda: h.append(name, "v"),
            lambda: h.set(name, "v"),
            lambda: h.get(name),
            lambda: h.has(name),
            lambda: h.delete(name),
        ):
            with pytest.raises(TypeError) as info:
                call()
            assert repr(name) in str(info.value)

    def test_valid_token_characters(self) -> None:
        name = "!#$%&'*+-.^_`|~09azAZ"
        assert is_token(name)
        h = Headers({name: "v"})
        assert h.get(name) == "v"
        assert not is_token("")

    @pytest.mark.parametrize(
        ("raw", "stored"),
        [(" v ", "v"), ("\t\r\nv\r\n\t", "v"), ("a  b", "a  b"), ("  ", ""), ("a\tb", "a\tb")],
    )
    def test_values_are_trimmed_of_http_whitespace(self, raw: str, stored: str) -> None:
        h = Headers()
        h.append("x", raw)
        assert h.get("x") == stored

    @pytest.mark.parametrize("value", ["a\rb", "a\nb", "a\x00b", "a\r\nX-Evil: 1"])
    def test_cr_lf_nul_inside_a_value_raise(self, value: str) -> None:
        h = Headers()
        with pytest.raises(TypeError, match="invalid header value"):
            h.append("x", value)
        with pytest.raises(TypeError, match="invalid header value"):
            h.set("x", value)
        assert not h.has("x")

    def test_value_above_latin1_raises(self) -> None:
        with pytest.raises(TypeError, match="U\\+00FF"):
            Headers({"x": "\u20ac"})

    def test_non_str_value_raises(self) -> None:
        with pytest.raises(TypeError, match="header value must be str or bytes"):
            Headers().append("x", 1)  # type: ignore[arg-type]


class TestIteration:
    def test_sorted_lowercase_and_combined(self) -> None:
        h = Headers()
        h.append("Zeta", "1")
        h.append("alpha", "2")
        h.append("Beta", "3")
        h.append("ALPHA", "4")
        assert list(h) == [("alpha", "2, 4"), ("beta", "3"), ("zeta", "1")]

    def test_set_cookie_entries_yielded_separately_in_sorted_position(self) -> None:
        h = Headers()
        h.append("x-last", "z")
        h.append("Set-Cookie", "a=1")
        h.append("content-type", "text/plain")
        h.append("Set-Cookie", "b=2")
        assert list(h) == [
            ("content-type", "text/plain"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("x-last", "z"),
        ]
        assert len(h) == 4
        assert h.keys() == ["content-type", "set-cookie", "set-cookie", "x-last"]
        assert h.values() == ["text/plain", "a=1", "b=2", "z"]
        assert h.items() == list(h)

    def test_iteration_is_a_snapshot(self) -> None:
        h = Headers({"a": "1", "b": "2"})
        seen = []
        for name, value in h:
            seen.append((name, value))
            h.append("c", "3")
            h.delete("b")
        assert seen == [("a", "1"), ("b", "2")]
        assert list(h) == [("a", "1"), ("c", "3, 3")]

    def test_dict_of_headers(self) -> None:
        h = Headers({"A": "1", "b": ["2", "3"]})
        assert dict(h) == {"a": "1", "b": "2, 3"}

    def test_getitem(self) -> None:
        h = Headers([("Set-Cookie", "a=1"), ("set-cookie", "b=2"), ("X", "y")])
        assert h["x"] == "y"
        assert h["SET-COOKIE"] == "a=1, b=2"
        with pytest.raises(KeyError):
            h["missing"]
        with pytest.raises(TypeError, match="invalid header name"):
            h["bad name"]


class TestPythonProtocol:
    def test_contains(self) -> None:
        h = Headers({"Host": "example.com"})
        assert "host" in h
        assert "HOST" in h
        assert b"host" in h
        assert "other" not in h
        assert "bad name" not in h
        assert 42 not in h

    def test_len_counts_iteration_pairs(self) -> None:
        h = Headers([("a", "1"), ("a", "2"), ("set-cookie", "x=1"), ("set-cookie", "y=2")])
        assert len(h) == 3
        assert len(h) == len(list(h))

    def test_equality(self) -> None:
        a = Headers([("A", "1"), ("b", "2")])
        b = Headers([("b", "2"), ("a", "1")])
        assert a == b
        assert a != Headers([("a", "1")])
        assert Headers([("a", "1"), ("a", "2")]) != Headers([("a", "2"), ("a", "1")])
        assert a != {"a": "1", "b": "2"}

    def test_unhashable(self) -> None:
        with pytest.raises(TypeError):
            hash(Headers())

    def test_repr_shows_sorted_pairs(self) -> None:
        h = Headers([("B", "2"), ("a", "1")])
        assert repr(h) == "Headers([('a', '1'), ('b', '2')])"
        assert repr(Headers()) == "Headers([])"
