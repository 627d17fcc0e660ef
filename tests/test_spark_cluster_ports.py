"""The standalone-cluster fixture (tests/support/spark_cluster.py) takes the master's ports from
the master's own log, never from a port guessed free beforehand (which another process can take
first: Spark then binds the next one, and the fixture read another process's UI)."""

from tests.support.spark_cluster import bound_ports

LOG = """\
Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties
26/11/27 18:03:22 INFO Utils: Successfully started service 'sparkMaster' on port 37107.
26/11/27 18:03:22 INFO Master: Starting Spark master at spark://127.0.0.1:37107
26/11/27 18:03:22 INFO Master: Running Spark version 4.3.0
26/11/27 18:03:22 INFO JettyUtils: Start Jetty 127.0.0.1:0 for MasterUI
26/11/27 18:03:22 INFO Utils: Successfully started service 'MasterUI' on port 38747.
26/11/27 18:03:22 INFO MasterWebUI: Bound MasterWebUI to 127.0.0.1, and started at http://127.0.0.1:38747
"""


def test_the_ports_come_from_the_masters_log():
    assert bound_ports(LOG) == (37107, 38747)
    assert bound_ports(LOG.split("INFO JettyUtils")[0]) == (37107, None)  # the UI not bound yet: wait
    assert bound_ports("") == (None, None)
