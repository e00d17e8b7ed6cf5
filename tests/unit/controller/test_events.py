"""controller/events.py: an Event's note is escaped before it is cut to the API's limit, so
tenant text copied into it cannot drive the terminal of whoever reads the Events."""

from __future__ import annotations

from typing import Any

from controller.events import NOTE_LIMIT, EventRecorder, Once

GROUP = {"metadata": {"namespace": "ns", "name": "g", "uid": "u1"}}


class Recording:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        return body


def _note(note: str) -> str:
    client = Recording()
    EventRecorder(client, "test").emit(  # type: ignore[arg-type]
        GROUP,
        "PodGroup",
        "scheduling.volcano.sh/v1beta1",
        type_="Warning",
        reason="Pending",
        action="UpdatePhase",
        note=note,
    )
    (body,) = client.bodies
    return str(body["note"])


def test_control_characters_in_a_note_are_escaped():
    assert _note("phase none -> Pending: cpu\n\x1b[2J\x1b[H State: Running") == (
        "phase none -> Pending: cpu\\n\\x1b[2J\\x1b[H State: Running"
    )
    assert _note("plain text, é") == "plain text, é"


def test_the_escaped_note_is_cut_to_the_limit():
    note = _note("\x1b" * NOTE_LIMIT)
    assert len(note) == NOTE_LIMIT and "\x1b" not in note
    assert note.startswith("\\x1b\\x1b")


def test_once_tells_each_text_about_each_object_once_in_bounded_memory():
    once = Once(kept=2)
    a, b = {"metadata": {"uid": "a"}}, {"metadata": {"uid": "b"}}
    assert [once.first(a, "x"), once.first(a, "x"), once.first(a, "y"), once.first(b, "x")] == [
        True,
        False,
        True,
        True,
    ]
    # The memory was full when b came: cleared, so an old text may be told again, never lost.
    assert once.first(a, "x") is True
