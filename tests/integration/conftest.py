from __future__ import annotations

import pytest

from tests.reviews import make_app


@pytest.fixture
def app_with():
    """app_with(classes) -> a Flask test client whose PriorityClass cache holds `classes`."""
    return lambda classes=(), **kw: make_app(classes, **kw).test_client()
