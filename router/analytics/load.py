"""Finding and reading record files: JSON Lines (PERMISSIVE, corrupt lines counted) and Parquet.

Nothing in the input can crash the job: a malformed or truncated line is counted as corrupt, a
well-formed record that misses required fields as invalid, and a Parquet file that is truncated or
has unusable columns is skipped and counted.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from router.analytics.inputs import Inputs
from router.analytics.schema import COLUMNS, CORRUPT, FIELDS, JSON_SCHEMA


def read_json(spark: SparkSession, files: list[str]) -> DataFrame:
    """JSON Lines with the explicit schema; unparseable lines keep their text in ``_corrupt_record``."""
    return (spark.read.schema(JSON_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .json(files)
            .withColumn("_file", F.input_file_name()))


def _parquet_group(spark: SparkSession, files: list[str]) -> DataFrame:
    """Files with the same physical schema, cast by name to the record schema (missing -> null)."""
    df = spark.read.parquet(*files)
    present = set(df.columns)
    cols = [F.col(name).cast(typ) if name in present else F.lit(None).cast(typ) for name, typ in FIELDS]
    return (df.select(*[c.alias(name) for c, (name, _) in zip(cols, FIELDS, strict=True)])
            .withColumn(CORRUPT, F.lit(None).cast("string"))
            .withColumn("_file", F.input_file_name()))


def read_parquet(spark: SparkSession, inputs: Inputs) -> DataFrame | None:
    """Every usable Parquet file as record rows; files that cannot be read move to ``inputs.bad_files``.

    The files' schemas are read on the driver with pyarrow (their footers only: no Spark job per file);
    files with the same schema are read together."""
    import pyarrow.parquet as pq

    groups: dict[str, list[str]] = {}
    for path in inputs.parquet_files:
        try:
            schema = pq.read_schema(path)
        except Exception as err:  # any reader error means: skip this file
            inputs.bad_files.append((path, f"unreadable Parquet: {str(err).splitlines()[0][:200]}"))
            continue
        groups.setdefault(str(schema.remove_metadata()), []).append(path)
    frames = []
    for files in groups.values():
        try:
            frame = _parquet_group(spark, files)
        except Exception as err:  # e.g. a column that cannot be cast
            inputs.bad_files += [(f, f"unusable columns: {str(err).splitlines()[0][:200]}") for f in files]
            continue
        frames.append(frame)
    inputs.parquet_files = [f for files in groups.values() for f in files
                            if f not in {b for b, _ in inputs.bad_files}]
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def read_records(spark: SparkSession, inputs: Inputs) -> DataFrame:
    """All records (JSON and Parquet) with columns COLUMNS + ``_corrupt_record`` + ``_file``."""
    frames = []
    if inputs.json_files:
        frames.append(read_json(spark, inputs.json_files))
    parquet = read_parquet(spark, inputs) if inputs.parquet_files else None
    if parquet is not None:
        frames.append(parquet)
    if not frames:
        schema = StructType([*JSON_SCHEMA.fields, StructField("_file", StringType())])
        return spark.createDataFrame([], schema)
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out.select(*COLUMNS, CORRUPT, "_file")
