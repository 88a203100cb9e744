"""Client options: the reconnect backoff cap (Pulsar's ``maxBackoffInterval``)."""

from __future__ import annotations

import random

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.client._util import Backoff
from magnetar.client.config import ClientOptions


class _Rng:
    def __init__(self) -> None:
        self._random = random.Random(7)

    def random(self) -> float:
        return self._random.random()


def test_backoff_max_is_validated_and_caps_the_doubling() -> None:
    with pytest.raises(InvalidArgumentError):
        ClientOptions(backoff_max_ms=50).validate()  # below the first step
    options = ClientOptions(backoff_max_ms=5_000)
    options.validate()
    backoff = Backoff(_Rng(), max_ms=options.backoff_max_ms)  # type: ignore[arg-type]
    delays_s = [backoff.next_s() for _ in range(12)]
    assert 0.09 <= delays_s[0] <= 0.11
    assert max(delays_s) <= 5.5 and delays_s[-1] >= 4.5  # +-10 % jitter around the cap
    assert ClientOptions().backoff_max_ms == 60_000  # the official client's default
