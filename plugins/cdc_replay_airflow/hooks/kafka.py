"""The Kafka cluster of an Airflow connection (default `kafka_default`), read the way
apache-airflow-providers-apache-kafka defines it: the extra ("Config Dict") is the
confluent-kafka configuration, whose `bootstrap.servers` names the brokers. A connection
with only host and port (e.g. `AIRFLOW_CONN_KAFKA_DEFAULT=kafka://127.0.0.1:9092`) works too.

The rest of the extra (security.protocol, sasl.mechanism, sasl.username/sasl.password,
ssl.ca.location, ...: librdkafka's names) is the cluster's client configuration; the
connection's login/password stand for sasl.username/sasl.password when the extra has none. It
reaches the replay app in the environment ($CDC_REPLAY_KAFKA_CONFIG, spark_apps.kafka_io),
never in its arguments, an XCom or a log.

The provider itself is not a dependency (it is not in the lock and would pull in its own
confluent-kafka pin), so the Connection is read here directly.
"""

from __future__ import annotations

DEFAULT_CONN_ID = "kafka_default"


def servers_of(host: str | None, port: int | None, extra: dict | None) -> str:
    """host:port[,host:port] from a connection's fields (pure; ValueError says what is missing)."""
    servers = (extra or {}).get("bootstrap.servers")
    if isinstance(servers, list):
        servers = ",".join(servers)
    if not servers and host:
        servers = ",".join(h if ":" in h else f"{h}:{port or 9092}" for h in host.split(","))
    if not servers or any(":" not in s for s in servers.split(",")):
        raise ValueError("the connection has neither bootstrap.servers in its extra nor a host: set extra "
                         '{"bootstrap.servers": "host:port"}')
    return servers.replace(" ", "")


def config_of(login: str | None, password: str | None, extra: dict | None) -> dict:
    """The client settings of a connection (pure): the extra without bootstrap.servers, with
    login/password as the SASL credentials unless the extra gives them."""
    config = {k: v for k, v in (extra or {}).items() if k != "bootstrap.servers"}
    if login and "sasl.username" not in config:
        config["sasl.username"] = login
    if password and "sasl.password" not in config:
        config["sasl.password"] = password
    return config


def _connection(conn_id: str):
    from airflow.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception as e:  # noqa: BLE001 - the SDK raises its own "not defined" error types
        raise LookupError(f"Kafka connection {conn_id!r}: {e}") from None


def client_config(conn_id: str = DEFAULT_CONN_ID) -> dict:
    """The client settings (security, SASL, SSL) of the Airflow connection `conn_id`."""
    conn = _connection(conn_id)
    return config_of(conn.login, conn.password, conn.extra_dejson)


def bootstrap_servers(conn_id: str = DEFAULT_CONN_ID) -> str:
    """The bootstrap servers of the Airflow connection `conn_id`; LookupError when it is missing
    or names no broker."""
    conn = _connection(conn_id)
    try:
        return servers_of(conn.host, conn.port, conn.extra_dejson)
    except ValueError as e:
        raise LookupError(f"Kafka connection {conn_id!r}: {e}") from None
