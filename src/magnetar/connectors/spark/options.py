"""What a Spark query asked of the connector, parsed once on the driver (pure; no pyspark).

Spark hands options over as strings with lower-cased keys; ``ReadOptions.parse`` and
``WriteOptions.parse`` accept any case and raise ``InvalidArgumentError`` naming the option at fault.
Both are frozen and picklable: they travel inside every input partition and writer.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from magnetar.base.errors import InvalidArgumentError
from magnetar.client.topic import full_topic_name
from magnetar.connectors.spark.offsets import Named, Spec, parse_spec

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
READ_MODES = ("auto", "bookies", "broker")
SPLITS = ("partition", "ledger")
VALUE_FORMATS = ("json", "avro")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"option {name}: expected true or false, got {text!r}")


def _int(options: dict[str, str], name: str, *, low: int = 0) -> int | None:
    text = options.get(name.lower())
    if text is None or not text.strip():
        return None
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"option {name}: expected an integer, got {text!r}") from None
    if value < low:
        raise InvalidArgumentError(f"option {name} must be >= {low}, got {value}")
    return value


def _choice(options: dict[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = options.get(name.lower(), choices[0]).strip().lower()
    if value not in choices:
        raise InvalidArgumentError(f"option {name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


#: ``authPluginClassName`` values (Pulsar's class names, or the short names) -> the auth method.
AUTH_PLUGINS = {
    "token": "token", "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "basic": "basic", "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
}


@dataclass(frozen=True)
class Credentials:
    """How the connector authenticates to the broker (binary protocol and admin API) as the
    reading role: ``method`` ``token`` (``data`` the JWT) or ``basic`` (``data`` ``user:password``)."""

    method: str
    data: str

    def __repr__(self) -> str:  # never print a secret in a plan or an error
        return f"Credentials({self.method}, ***)"

    @property
    def http_authorization(self) -> str:
        """The ``Authorization`` header the admin API's providers check."""
        if self.method == "token":
            return f"Bearer {self.data}"
        return "Basic " + base64.b64encode(self.data.encode()).decode()

    @classmethod
    def parse(cls, options: dict[str, str]) -> Credentials | None:
        """Pulsar's client options ``authPluginClassName`` + ``authParams`` (token: ``token:<jwt>``,
        ``file:<path>`` or the JWT; basic: ``{"userId": .., "password": ..}`` or ``user:password``),
        or ``token`` alone; None without them."""
        plugin = options.get("authpluginclassname", "").strip()
        params = options.get("authparams", "").strip()
        token = options.get("token", "").strip()
        if token and plugin:
            raise InvalidArgumentError("give either the option token or authPluginClassName + authParams, not both")
        if token:
            return cls("token", token)
        if not plugin:
            if params:
                raise InvalidArgumentError("option authParams needs authPluginClassName (token or basic)")
            return None
        method = AUTH_PLUGINS.get(plugin)
        if method is None:
            raise InvalidArgumentError(f"option authPluginClassName: {plugin!r} is not supported (one of "
                                  f"{', '.join(sorted(AUTH_PLUGINS))})")
        if not params:
            raise InvalidArgumentError(f"option authParams is needed for authPluginClassName {plugin}")
        return cls(method, _token_params(params) if method == "token" else _basic_params(params))


def _token_params(params: str) -> str:
    if params.startswith("token:"):
        return params.removeprefix("token:").strip()
    if params.startswith("file:"):
        path = params.removeprefix("file:").removeprefix("//")
        try:
            return Path(path).read_text().strip()
        except OSError as error:
            raise InvalidArgumentError(f"option authParams: cannot read the token file {path}: {error}") from None
    return params


def _basic_params(params: str) -> str:
    if params.startswith("{"):
        try:
            parsed = json.loads(params)
            return f"{parsed['userId']}:{parsed['password']}"
        except (ValueError, KeyError, TypeError):
            raise InvalidArgumentError('option authParams for basic: expected {"userId": ..., "password": ...}') from None
    if ":" not in params:
        raise InvalidArgumentError("option authParams for basic: expected user:password")
    return params


@dataclass(frozen=True)
class ReadOptions:
    service_url: str
    metadata_url: str | None
    topics: tuple[str, ...]  # full names as given (partitioned topics are expanded when planning)
    topics_pattern: str | None
    starting: Named | dict[str, Spec]
    ending: Named | dict[str, Spec]
    starting_timestamp_ms: int | None
    fail_on_data_loss: bool
    max_records_per_trigger: int | None
    max_bytes_per_trigger: int | None
    min_records_per_trigger: int | None
    split_by: str
    min_partitions: int
    read_mode: str
    value_schema: str | None
    value_format: str  # how valueSchema columns are decoded: json, or avro (the topic's registered schemas)
    subscription: str | None  # streaming: the durable subscription advanced on commit (``progress``)
    admin_url: str | None
    #: Where offloaded ledgers are (the broker's offload root): a directory or ``s3://bucket/prefix``;
    #: None: ``<data dir>/offload`` of an ``embedded:`` metadataUrl (a standalone's default).
    lakehouse_url: str | None = None
    lakehouse_s3_endpoint: str | None = None
    #: Whom the connector reads as (binary protocol and admin API); None: no authentication.
    credentials: Credentials | None = None

    @property
    def plans_via_admin(self) -> bool:
        """Layouts come from the brokers' admin API (``readLayout``, authorized as the reading role)
        rather than from the metadata store: ``adminUrl`` given and ``metadataUrl`` not."""
        return self.metadata_url is None and self.admin_url is not None

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        options = _lower(raw)
        given = [name for name in ("topic", "topics", "topicspattern") if options.get(name, "").strip()]
        if len(given) != 1:
            raise InvalidArgumentError("give exactly one of the options topic, topics or topicsPattern")
        topics: tuple[str, ...] = ()
        pattern = None
        if given[0] == "topicspattern":
            pattern = options["topicspattern"].strip()
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InvalidArgumentError(f"option topicsPattern is not a regular expression: {exc}") from None
        else:
            names = [t.strip() for t in options[given[0]].split(",") if t.strip()]
            topics = tuple(dict.fromkeys(full_topic_name(t) for t in names))
        if streaming and "endingoffsets" in options:
            raise InvalidArgumentError("option endingOffsets is for batch reads only")
        subscription = options.get("subscription", "").strip() or None
        admin_url = options.get("adminurl", "").strip() or None
        if subscription is not None and not streaming:
            raise InvalidArgumentError("option subscription is for streaming reads only")
        if subscription is not None and admin_url is None:
            raise InvalidArgumentError("option subscription needs adminUrl (the broker's HTTP address, http://host:port)")
        return cls(
            service_url=options.get("serviceurl", DEFAULT_SERVICE_URL),
            metadata_url=options.get("metadataurl") or None,
            topics=topics,
            topics_pattern=pattern,
            starting=parse_spec(options.get("startingoffsets"), "latest" if streaming else "earliest"),
            ending=parse_spec(options.get("endingoffsets"), "latest"),
            starting_timestamp_ms=_int(options, "startingTimestamp"),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_records_per_trigger=_int(options, "maxRecordsPerTrigger", low=1),
            max_bytes_per_trigger=_int(options, "maxBytesPerTrigger", low=1),
            min_records_per_trigger=_int(options, "minRecordsPerTrigger", low=1),
            split_by=_choice(options, "splitBy", SPLITS),
            min_partitions=_int(options, "minPartitions", low=1) or 1,
            read_mode=_choice(options, "readMode", READ_MODES),
            value_schema=options.get("valueschema") or None,
            value_format=_choice(options, "valueFormat", VALUE_FORMATS),
            subscription=subscription,
            admin_url=admin_url,
            lakehouse_url=options.get("lakehouseurl", "").strip() or None,
            lakehouse_s3_endpoint=options.get("lakehouses3endpoint", "").strip() or None,
            credentials=Credentials.parse(options),
        )

    @property
    def lakehouse(self) -> str | None:
        """The offload root to read offloaded ledgers from (see ``lakehouse_url``)."""
        if self.lakehouse_url:
            return self.lakehouse_url
        if self.metadata_url and self.metadata_url.startswith("embedded:"):
            metadata_dir = self.metadata_url.removeprefix("embedded:").rstrip("/")
            return metadata_dir.rsplit("/", 1)[0] + "/offload"
        return None


@dataclass(frozen=True)
class WriteOptions:
    service_url: str
    topic: str | None  # None: every row names its topic in a ``topic`` column
    producer_name: str | None  # prefix of the stable producer names; None: derived from the query
    exactly_once: bool
    batching: bool
    fail_task_after_rows: int | None  # failure drill: first attempts of tasks fail after N rows
    credentials: Credentials | None = None  # whom the connector writes as


    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> WriteOptions:
        options = _lower(raw)
        topic = options.get("topic", "").strip()
        return cls(
            service_url=options.get("serviceurl", DEFAULT_SERVICE_URL),
            topic=full_topic_name(topic) if topic else None,
            producer_name=options.get("producername") or None,
            exactly_once=_bool(options, "exactlyOnce", True),
            batching=_bool(options, "batching", True),
            fail_task_after_rows=_int(options, "failTaskAfterRows", low=1),
            credentials=Credentials.parse(options),
        )
