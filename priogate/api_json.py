"""JSON from the API server (watch events, response bodies, the ledger's shards), decoded with orjson.

orjson parses a PodGroup's watch event about 2.5 times faster than the standard library, and
under load decoding was a tenth of a quota worker's time. What orjson refuses and the standard
library accepts (NaN, infinities, unpaired surrogates: nothing kube-apiserver's Go encoder
emits) is decoded by the standard library, so no input decodes worse than before.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
