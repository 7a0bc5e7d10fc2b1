"""Epoch seconds to protobuf Timestamps: what protobuf's own conversion gives, range checks included."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from memevo.sidecar.domain import from_timestamp, set_timestamp, to_timestamp
from memevo.v1 import memory_pb2


def _protobuf(epoch_s: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMicroseconds(round(epoch_s * 1_000_000))
    return stamp


def test_to_timestamp_matches_protobufs_conversion_across_the_range() -> None:
    edges = [0.0, -1.5, -0.000001, 0.0000005, 1_764_500_000.123456, 253_402_300_799.0, -62_135_596_800.0]
    values = edges + np.random.default_rng(0).uniform(-6.2e10, 2.5e11, size=5_000).tolist()
    for value in values:
        assert to_timestamp(value) == _protobuf(value), value
        assert from_timestamp(to_timestamp(value)) == pytest.approx(value, abs=1e-6 * max(1.0, abs(value) * 1e-9))


def test_set_timestamp_writes_what_copying_to_timestamp_writes_over_any_earlier_value() -> None:
    values = [0.0, 1_764_500_000.0, 1_764_500_000.123456, -1.5, *np.random.default_rng(1).uniform(0, 2e9, 500).tolist()]
    for earlier in (None, 1_764_400_000.999999):
        for value in values:
            copied, set_in_place = memory_pb2.Memory(), memory_pb2.Memory()
            if earlier is not None:
                copied.last_access_at.CopyFrom(to_timestamp(earlier))
                set_in_place.last_access_at.CopyFrom(to_timestamp(earlier))
            copied.last_access_at.CopyFrom(to_timestamp(value))
            set_timestamp(set_in_place.last_access_at, value)
            assert set_in_place.SerializeToString() == copied.SerializeToString(), (earlier, value)


@pytest.mark.parametrize("value", [253_402_300_800.0, -62_135_596_800.5, 1e13])
def test_a_time_outside_years_1_to_9999_is_refused_as_protobuf_refuses_it(value: float) -> None:
    with pytest.raises(ValueError, match="Timestamp is not valid"):
        _protobuf(value)
    with pytest.raises(ValueError, match="Timestamp is not valid"):
        to_timestamp(value)
    with pytest.raises(ValueError, match="Timestamp is not valid"):
        set_timestamp(Timestamp(), value)
