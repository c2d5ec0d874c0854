"""The report's tables, each a function from the classified records to a small DataFrame.

Definitions (see also the report's "How to read this" section):

- a delivery record *left the mesh* at its node when ``out_link`` is ``client`` or ``broker``; that
  node is the delivery's *egress*. It *entered the mesh* there when ``in_link`` is ``client`` or ``broker``.
- settlement latency = ``settled - arrival`` at the node that wrote the record, in whole microseconds,
  over outcomes accepted/rejected/released/modified (not presettled or dropped). Percentiles are exact
  (Spark's ``percentile``: linear interpolation between the closest ranks, as numpy's default).
- throughput buckets are whole epoch seconds of ``settled``.
- top producers: records that entered the mesh, by (node, in_link, address); top consumers: records
  that left it, by (node, out_link, address). Records carry no link ids, so these are the finest keys.
- hops: per node, every record at that node (hops so far on arrival); per address and mesh-wide,
  records at the egress (the path length each delivery took).
- credit starvation: per (node, link), each ``credit_starved_start`` is closed by the link's next
  ``credit_starved_end`` or ``link_down``; a start followed by another start or by nothing is *open*
  and adds no time.
- ingress -> egress traffic: records at the egress, keyed (ingress, node).
- per-link utilisation: records that name a ``next_hop`` (they left ``node`` on its inter-router link
  to that peer), per (node, next_hop) and 1 s bucket of ``settled``, as the throughput tables.
- ingress -> egress end-to-end latency: records written at the ingress (hops 0, in_link client or
  broker) that name their ``egress``: their settled - arrival spans arrival at the ingress until the
  outcome came back there. Multicast (egress null) and records from before the field are left out.
- latency at the egress, by ingress -> egress: settled - arrival at the egress node (the last leg).

Speed: the records are scanned once into ``cube``: delivery records counted (and their bytes summed)
per distinct (route, outcome, second, latency). Records of one run of a node's batch share all of
these, so the cube is many times smaller than the records; every delivery table is an aggregate of
the cube (latency percentiles with ``percentile``'s frequency argument: still exact).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from router.analytics.schema import CORRUPT, EXIT_LINKS, SETTLING_OUTCOMES

PERCENTILES = (0.5, 0.9, 0.99)


def _sorted_by(*cols):
    """One partition, sorted: small tables come out as one ordered file, without the extra job (and
    sampling pass) that a global orderBy costs."""
    return lambda df: df.coalesce(1).sortWithinPartitions(*cols)


def classify(records: DataFrame) -> DataFrame:
    """Add ``_class``: corrupt (unparseable line), delivery, event, or invalid (missing required fields)."""
    c = F.col
    delivery = ((c("kind") == "delivery") & c("node").isNotNull() & c("outcome").isNotNull()
                & c("arrival").isNotNull() & c("settled").isNotNull())
    event = (c("kind") == "event") & c("node").isNotNull() & c("event").isNotNull() & c("time").isNotNull()
    return records.withColumn(
        "_class",
        F.when(c(CORRUPT).isNotNull(), "corrupt").when(delivery, "delivery").when(event, "event")
        .otherwise("invalid"))


ROUTE_COLUMNS = ("kind", "node", "address", "ingress", "hops", "in_link", "out_link", "outcome", "egress",
                 "next_hop")
CUBE_KEYS = ("cls", *ROUTE_COLUMNS, "second", "lat_us")


def cube(classified: DataFrame) -> DataFrame:
    """Every record counted per distinct CUBE_KEYS, in one pass: (CUBE_KEYS..., messages, bytes,
    first_arrival, last_settled, first_time, last_time, entered_mesh, left_mesh).

    ``cls`` is the record's class (see `classify`); ``second`` (of settled) and ``lat_us`` (settled -
    arrival, whole microseconds) are null for records without those fields (events): an event's
    delivery columns are null, so events make a few rows per node. Every aggregate has a fixed-width
    buffer, so Spark aggregates in a hash map (a ``first`` of a string column would make it sort the
    records: measured slower than grouping by the nine route columns)."""
    c = F.col
    return (classified.groupBy(
                c("_class").alias("cls"), *ROUTE_COLUMNS,
                F.floor(c("settled")).cast("long").alias("second"),
                F.round((c("settled") - c("arrival")) * 1_000_000).cast("long").alias("lat_us"))
            .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"),
                 F.min("arrival").alias("first_arrival"), F.max("settled").alias("last_settled"),
                 F.min("time").alias("first_time"), F.max("time").alias("last_time"))
            .withColumn("entered_mesh", c("in_link").isin(*EXIT_LINKS))
            .withColumn("left_mesh", c("out_link").isin(*EXIT_LINKS)))


def deliveries_of(cube_df: DataFrame) -> DataFrame:
    """The cube's rows of valid delivery records."""
    return cube_df.filter(F.col("cls") == "delivery")


ROUTE_KEYS = ("cls", "kind", "node", "address", "ingress", "hops", "in_link", "out_link", "outcome", "egress",
              "entered_mesh", "left_mesh")


def routes(cube_df: DataFrame) -> DataFrame:
    """(ROUTE_KEYS..., messages, bytes, first_arrival, first_time, last_settled, last_time): the cube
    without time and latency (the summary's counts, and router.analytics.derived's outcomes, hops,
    producers, consumers and ingress -> egress traffic, come from it)."""
    return (cube_df.groupBy(*ROUTE_KEYS)
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"),
                 *(F.min(n).alias(n) for n in ("first_arrival", "first_time")),
                 *(F.max(n).alias(n) for n in ("last_settled", "last_time"))))


def throughput_cells(d: DataFrame) -> DataFrame:
    """(node, address, next_hop, second, messages, bytes) of the delivery cube `d`: the throughput and
    per-link utilisation tables are regroupings of it."""
    return (d.groupBy("node", "address", "next_hop", "second")
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes")))


def events_of(classified: DataFrame) -> DataFrame:
    """Valid event records."""
    return (classified.filter(F.col("_class") == "event")
            .select("node", "event", "link", "address", "peer", "time"))


def input_problems(classified: DataFrame) -> DataFrame:
    """(file, problem, count) per input file: malformed lines, and records that miss required fields by
    their kind (delivery, event, or a kind this reader does not know)."""
    return (classified.filter(F.col("_class").isin("corrupt", "invalid"))
            .groupBy(F.regexp_replace("_file", "^file:(//)?", "").alias("file"),
                     F.when(F.col("_class") == "corrupt", "malformed lines")
                     .when(F.col("kind") == "delivery", "incomplete delivery records")
                     .when(F.col("kind") == "event", "incomplete event records")
                     .otherwise("records of unknown kind").alias("problem"))
            .agg(F.count("*").alias("count"))
            .transform(_sorted_by("file", "problem")))


def throughput(d: DataFrame, key: str) -> DataFrame:
    """(key, second, messages, bytes): messages settled per 1 s bucket."""
    return (d.groupBy(key, "second")
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"))
            .transform(_sorted_by(key, "second")))


def outcomes(d: DataFrame, key: str) -> DataFrame:
    """(key, outcome, messages)."""
    return (d.groupBy(key, "outcome").agg(F.sum("messages").alias("messages"))
            .transform(_sorted_by(key, "outcome")))


def _latency(d: DataFrame, keys: list[str]) -> DataFrame:
    c = F.col
    p = F.percentile(c("lat_us"), list(PERCENTILES), c("messages"))
    agg = (d.filter(c("outcome").isin(*SETTLING_OUTCOMES))
           .groupBy(*keys)
           .agg(F.sum("messages").alias("deliveries"), p.alias("p"),
                (F.sum(c("lat_us") * c("messages")) / F.sum("messages")).alias("mean"),
                F.max("lat_us").alias("max")))
    return agg.select(*keys, "deliveries",
                      (F.col("p")[0] / 1000).alias("p50_ms"), (F.col("p")[1] / 1000).alias("p90_ms"),
                      (F.col("p")[2] / 1000).alias("p99_ms"), (F.col("mean") / 1000).alias("mean_ms"),
                      (F.col("max") / 1000).alias("max_ms"))


def latency(d: DataFrame, key: str) -> DataFrame:
    """(key, deliveries, p50_ms, p90_ms, p99_ms, mean_ms, max_ms) of settlement latency."""
    return _latency(d, [key]).transform(_sorted_by(key))


def hops_by(d: DataFrame, key: str | None) -> DataFrame:
    """Hop histogram: per node over all its records; per address / mesh-wide (key None) at the egress."""
    rows = d.filter(F.col("hops").isNotNull())
    if key != "node":
        rows = rows.filter(F.col("left_mesh"))
    keys = [key, "hops"] if key else ["hops"]
    return rows.groupBy(*keys).agg(F.sum("messages").alias("messages")).transform(_sorted_by(*keys))


def top_producers(d: DataFrame) -> DataFrame:
    """(node, in_link, address, messages, bytes) for records that entered the mesh, busiest first."""
    return (d.filter(F.col("entered_mesh")).groupBy("node", "in_link", "address")
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"))
            .transform(_sorted_by(F.desc("messages"), "node", "address")))


def top_consumers(d: DataFrame) -> DataFrame:
    """(node, out_link, address, messages, bytes, accepted) for records that left the mesh, busiest first."""
    return (d.filter(F.col("left_mesh")).groupBy("node", "out_link", "address")
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"),
                 F.sum(F.when(F.col("outcome") == "accepted", F.col("messages")).otherwise(0))
                 .alias("accepted"))
            .transform(_sorted_by(F.desc("messages"), "node", "address")))


def starvation_links(e: DataFrame) -> DataFrame:
    """(node, link, address, intervals, open_intervals, starved_s) of credit starvation per link."""
    c = F.col
    marks = e.filter(c("link").isNotNull()
                     & c("event").isin("credit_starved_start", "credit_starved_end", "link_down"))
    order = F.when(c("event") == "credit_starved_start", 1).otherwise(0)  # at equal times, ends first
    w = Window.partitionBy("node", "link").orderBy("time", order)
    starts = (marks.withColumn("next_event", F.lead("event").over(w))
              .withColumn("next_time", F.lead("time").over(w))
              .filter(c("event") == "credit_starved_start"))
    closed = c("next_event").isin("credit_starved_end", "link_down")
    dur_us = F.when(closed, F.round((c("next_time") - c("time")) * 1_000_000).cast("long")).otherwise(0)
    return (starts.groupBy("node", "link")
            .agg(F.first("address", ignorenulls=True).alias("address"),
                 F.sum(closed.cast("long")).alias("intervals"),
                 F.sum((~closed).cast("long")).alias("open_intervals"),
                 F.sum(dur_us).alias("starved_us"))
            .select("node", "link", "address", "intervals", "open_intervals",
                    (c("starved_us") / 1_000_000).alias("starved_s"))
            .transform(_sorted_by(F.desc("starved_s"), "node", "link")))


def starvation_addresses(links: DataFrame) -> DataFrame:
    """(address, links, intervals, open_intervals, starved_s): per-link starvation summed per address."""
    return (links.groupBy("address")
            .agg(F.count("*").alias("links"), F.sum("intervals").alias("intervals"),
                 F.sum("open_intervals").alias("open_intervals"),
                 (F.sum(F.round(F.col("starved_s") * 1_000_000).cast("long")) / 1_000_000).alias("starved_s"))
            .transform(_sorted_by(F.desc("starved_s"), "address")))


def pair_traffic(d: DataFrame) -> DataFrame:
    """(ingress, egress, messages, bytes) for deliveries that left the mesh, from their egress records."""
    return (d.filter(F.col("left_mesh") & F.col("ingress").isNotNull())
            .groupBy("ingress", F.col("node").alias("egress"))
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"))
            .transform(_sorted_by("ingress", "egress")))


def pair_latency(d: DataFrame) -> DataFrame:
    """(ingress, egress, deliveries, p50_ms, …): end-to-end latency from the ingress records.

    A record written where the delivery entered the mesh (hops 0) spans the whole way: arrival at the
    ingress until the outcome came back there. It names the egress when the ingress knew it."""
    c = F.col
    rows = (d.filter(c("entered_mesh") & (c("hops") == 0) & c("egress").isNotNull())
            .select(c("node").alias("ingress"), "egress", "outcome", "lat_us", "messages"))
    return _latency(rows, ["ingress", "egress"]).transform(_sorted_by("ingress", "egress"))


def pair_latency_egress(d: DataFrame) -> DataFrame:
    """(ingress, egress, deliveries, p50_ms, …): latency at the egress node only (the last leg)."""
    rows = (d.filter(F.col("left_mesh") & F.col("ingress").isNotNull())
            .select("ingress", F.col("node").alias("egress"), "outcome", "lat_us", "messages"))
    return _latency(rows, ["ingress", "egress"]).transform(_sorted_by("ingress", "egress"))


def windows(d: DataFrame, mid: int) -> DataFrame:
    """(window, address, messages, bytes, undeliverable, p50_ms, p99_ms): deliveries settled before the
    whole second ``mid`` (window "first") and from it ("second"), per address; latency over the
    settling outcomes, undeliverable = released or modified."""
    c = F.col
    p = F.percentile(F.when(c("outcome").isin(*SETTLING_OUTCOMES), c("lat_us")), [0.5, 0.99], c("messages"))
    return (d.groupBy(F.when(c("second") < mid, "first").otherwise("second").alias("window"), "address")
            .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"),
                 F.sum(F.when(c("outcome").isin("released", "modified"), c("messages")).otherwise(0))
                 .alias("undeliverable"), p.alias("p"))
            .select("window", "address", "messages", "bytes", "undeliverable",
                    (c("p")[0] / 1000).alias("p50_ms"), (c("p")[1] / 1000).alias("p99_ms"))
            .transform(_sorted_by("address", "window")))
