"""Metric label texts are remembered per label set (shared/metrics.py): each set must still get its own text."""

from __future__ import annotations

from flux7.shared.metrics import Metrics, _labels


def test_each_label_set_gets_its_own_sorted_escaped_text() -> None:
    assert _labels({"tool": "a", "agent": "b"}) == 'agent="b",tool="a"'
    assert _labels({"tool": "a", "agent": "c"}) == 'agent="c",tool="a"'
    assert _labels({"agent": "c", "tool": "a"}) == 'agent="c",tool="a"'  # order given does not matter
    assert _labels({"tool": 'q"\\\n'}) == 'tool="q\\"\\\\\\n"'
    assert _labels({}) == ""


def test_an_observation_lands_in_its_own_bucket_for_each_label_set() -> None:
    bounds = (0.1, 1.0)
    full = "agent_mesh_tool_call_duration_seconds"
    fast = Metrics._observation(full, bounds, 0.05, {"tool": "a"})
    slow = Metrics._observation(full, bounds, 5.0, {"tool": "a"})
    other = Metrics._observation(full, bounds, 0.05, {"tool": "b"})
    assert fast[0] == (f"{full}_bucket", 'le="0.1",tool="a"', 1.0)
    assert slow[0] == (f"{full}_bucket", 'le="+Inf",tool="a"', 1.0)
    assert other[0] == (f"{full}_bucket", 'le="0.1",tool="b"', 1.0)
    assert fast[1:] == [(f"{full}_sum", 'tool="a"', 0.05), (f"{full}_count", 'tool="a"', 1.0)]
