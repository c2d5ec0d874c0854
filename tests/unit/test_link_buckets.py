"""The summary's per-link series (router.analytics.questions): bucket width and re-bucketing."""

from router.analytics.questions import MAX_BUCKETS, bucket_seconds, link_utilisation


def test_bucket_width_keeps_at_most_max_buckets():
    assert bucket_seconds(100, 100) == 1
    assert bucket_seconds(0, MAX_BUCKETS - 1) == 1
    assert bucket_seconds(0, MAX_BUCKETS) == 2
    assert bucket_seconds(0, 3600) == 15
    for span in (1, 299, 300, 301, 5_000, 86_400, 10 * 86_400, 400 * 86_400):
        width = bucket_seconds(0, span - 1)
        assert -(-span // width) <= MAX_BUCKETS, (span, width)


def test_series_are_rebucketed_sums_per_link():
    summary = [{"node": "A", "next_hop": "B", "messages": 6}, {"node": "B", "next_hop": "C", "messages": 1}]
    cells = [{"node": "A", "next_hop": "B", "second": s, "messages": m, "bytes": 10 * m}
             for s, m in ((1000, 1), (1001, 2), (1599, 3))]
    cells.append({"node": "B", "next_hop": "C", "second": 1300, "messages": 1, "bytes": 7})
    got = link_utilisation(summary, cells)
    assert got["bucket_s"] == 2                          # 600 s span
    assert [r["series"] for r in got["links"]] == [
        [{"start": 1000, "messages": 3, "bytes": 30}, {"start": 1598, "messages": 3, "bytes": 30}],
        [{"start": 1300, "messages": 1, "bytes": 7}]]
    assert got["links"][0]["messages"] == 6
    assert link_utilisation([], []) == {"bucket_s": 1, "links": []}
