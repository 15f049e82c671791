"""The Responses API's stored responses (`previous_response_id`): bounded by count per API
key, the least recently used let go first, and no key finds another's."""

from __future__ import annotations

import pytest

from specrun.server.requests import ApiError
from specrun.server.responses import Stored


def said(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


def test_each_key_keeps_its_last_responses_and_finds_only_its_own():
    stored = Stored(limit=2)
    for name in ("r1", "r2", "r3"):
        stored.keep("api-key-0", name, [said(name)])
    stored.keep("api-key-1", "r9", [said("r9")])
    assert stored.conversation("api-key-0", "r2") == [said("r2")]
    stored.keep("api-key-0", "r4", [said("r4")])  # r2 was used since r3: r3 goes
    for tenant, gone in (("api-key-0", "r1"), ("api-key-0", "r3"), ("api-key-1", "r2")):
        with pytest.raises(ApiError) as refused:
            stored.conversation(tenant, gone)
        assert (refused.value.status, refused.value.param, refused.value.code) == (
            400,
            "previous_response_id",
            "previous_response_not_found",
        )
        assert f"'{gone}'" in str(refused.value) and "last 2" in str(refused.value)
    assert stored.conversation("api-key-1", "r9") == [said("r9")]


def test_a_conversation_found_is_a_copy():
    stored = Stored()
    stored.keep(None, "r1", [said("a")])
    stored.conversation(None, "r1").append(said("b"))
    assert stored.conversation(None, "r1") == [said("a")]
