"""The daemon-wide budget for media decoding in flight (mlxd.api.media_budget): a request that does not fit waits
for room, and past its wait gets 503 with Retry-After; one request's own caps are 400s."""

from __future__ import annotations

import asyncio

import pytest

from mlxd.api.media_budget import MAX_REQUEST_BYTES, MAX_REQUEST_PIXELS, MediaBusy, PixelBudget, check_request
from mlxd.errors import InvalidRequest


def test_a_request_waits_for_room_then_runs() -> None:
    async def scenario() -> list[str]:
        budget, order = PixelBudget(100), []

        async def first() -> None:
            async with budget.held(80):
                order.append("first in")
                await asyncio.sleep(0.1)
            order.append("first out")

        async def second() -> None:
            await asyncio.sleep(0.01)
            async with budget.held(50, wait_s=5):
                order.append("second in")
                assert budget.used == 50

        await asyncio.gather(first(), second())
        assert budget.used == 0
        return order

    assert asyncio.run(scenario()) == ["first in", "first out", "second in"]


def test_past_its_wait_a_request_gets_503_with_retry_after() -> None:
    async def scenario() -> None:
        budget = PixelBudget(100)
        async with budget.held(100):
            with pytest.raises(MediaBusy) as refused:
                async with budget.held(1, wait_s=0.05):
                    pass
        assert refused.value.status == 503 and refused.value.retry_after == 1
        assert budget.used == 0
        async with budget.held(10**12, wait_s=0):  # more than exists is capped at the whole budget, not refused
            assert budget.used == 100

    asyncio.run(scenario())


def test_one_requests_caps_are_400() -> None:
    check_request(MAX_REQUEST_PIXELS, MAX_REQUEST_BYTES)
    with pytest.raises(InvalidRequest, match="images too large in total"):
        check_request(MAX_REQUEST_PIXELS + 1, 0)
    with pytest.raises(InvalidRequest, match="media too large in total"):
        check_request(0, MAX_REQUEST_BYTES + 1)
