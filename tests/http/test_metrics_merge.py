"""merge_expositions: several replicas' /metrics as one, each series labelled with its replica."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from lexi.http.ops.metrics import Metrics, merge_expositions


def test_series_keep_their_family_and_gain_a_replica_label():
    first, second = Metrics(), Metrics()
    first.requests.labels("chat_completions", "200").inc()
    second.requests.labels("chat_completions", "429").inc(3)
    first.replica_info("r1", 11)
    second.replica_info("r2", 12)
    text = merge_expositions({"r1": first.exposition().decode(), "r2": second.exposition().decode()}).decode()
    assert text.count("# TYPE lexi_requests_total counter") == 1  # one family, not one per replica
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {(s.labels["replica"], s.labels["status"]): s.value for s in families["lexi_requests"].samples
                if s.name == "lexi_requests_total"}  # fmt: skip
    assert requests == {("r1", "200"): 1.0, ("r2", "429"): 3.0}
    info = {(s.labels["replica"], s.labels["pid"]) for s in families["lexi_replica_info"].samples}
    assert info == {("r1", "11"), ("r2", "12")}
    slots = {s.labels["replica"] for s in families["lexi_slots_total"].samples}
    assert slots == {"r1", "r2"}
