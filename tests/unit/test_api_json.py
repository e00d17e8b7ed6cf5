"""priogate.api_json: orjson's speed, never a worse answer than the standard library's."""

from __future__ import annotations

import json
import math

import pytest

from priogate import api_json


@pytest.mark.parametrize(
    "text",
    [
        b'{"type":"ADDED","object":{"metadata":{"name":"a"},"spec":{"minMember":2}}}',
        '{"unicode":"\\u00e9t\\u00e9","nested":[1,2.5,null,true,{"k":"v"}]}',
        b'{"big":18446744073709551615,"negative":-9223372036854775808}',
        b"[]",
    ],
)
def test_what_kube_apiserver_sends_decodes_as_the_standard_library_decodes_it(text: bytes | str) -> None:
    assert api_json.loads(text) == json.loads(text)


def test_what_orjson_refuses_is_decoded_by_the_standard_library() -> None:
    assert math.isnan(api_json.loads(b'{"a":NaN}')["a"])
    assert api_json.loads(b'{"a":1e400}')["a"] == math.inf
    assert api_json.loads(b'{"a":"\\ud800"}')["a"] == "\ud800"


@pytest.mark.parametrize("text", [b"", b"{", b'{"a":}', b"not json", b'{"a":1}}'])
def test_input_neither_accepts_raises_the_standard_error(text: bytes) -> None:
    with pytest.raises(json.JSONDecodeError):
        api_json.loads(text)
