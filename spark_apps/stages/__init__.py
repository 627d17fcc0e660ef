"""The replay's stages, each in its own module, run in this order by the driver
(spark_apps/replay.py) over one `RunContext` (context.py); each hands the next a small result
(docs/architecture.md, "What a replay does"):

    validate  →  decode  →  dedupe (and cut)  →  history (schema history, quarantine moves)
              →  summary (quarantine objects, reasons)  →  output (the driver)  →  summary (manifest)

Stages never import the driver.
"""
