"""The explicit Spark schema of telemetry records (see router/telemetry/SCHEMA.md)."""

from __future__ import annotations

from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

CORRUPT = "_corrupt_record"

FIELDS: tuple[tuple[str, object], ...] = (
    ("kind", StringType()),
    ("node", StringType()),
    ("address", StringType()),
    ("ingress", StringType()),
    ("hops", LongType()),
    ("in_link", StringType()),
    ("out_link", StringType()),
    ("outcome", StringType()),
    ("size", LongType()),
    ("arrival", DoubleType()),
    ("settled", DoubleType()),
    ("egress", StringType()),  # added with the mesh; older files lack it: null
    ("next_hop", StringType()),  # added with per-link utilisation; older files lack it: null
    ("event", StringType()),
    ("link", StringType()),
    ("peer", StringType()),
    ("time", DoubleType()),
)
COLUMNS = tuple(name for name, _ in FIELDS)
RECORD_SCHEMA = StructType([StructField(name, typ, True) for name, typ in FIELDS])
JSON_SCHEMA = StructType([*RECORD_SCHEMA.fields, StructField(CORRUPT, StringType(), True)])

SETTLING_OUTCOMES = ("accepted", "rejected", "released", "modified")  # latency is measured for these
EXIT_LINKS = ("client", "broker")  # a delivery that leaves on one of these has left the mesh here
