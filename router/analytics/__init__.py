"""``meshrouter analyze``: a PySpark job that turns node telemetry into Parquet tables and report.html.

``router.analytics.cli`` (argument checks, no Spark import) -> ``job.run_analysis`` -> ``load`` (JSON
Lines / Parquet with an explicit schema) -> ``tables`` (the cube: every record counted once by class,
route, second and latency; the Spark tables) -> ``derived`` (small tables regrouped with pyarrow) ->
``questions`` -> ``report`` + ``plots``; ``result`` is what a run produced (the job fills it, the report
reads it). ``follow`` is the live view (``--follow``: Structured Streaming). PySpark and matplotlib are
imported only when the job runs (the command imports ``job`` or ``follow`` then).

Services layer, run by the CLI only: may import router.telemetry (the record schema), router.config and
the base; PySpark and matplotlib only when the job runs. Never imported by the node.
"""
