"""What every admin router shares: the context, routes with their OpenAPI facts, bodies, errors.

``AdminContext`` is what handlers see: the broker service (topics, policies, resources) and this
broker's cluster name and URLs. ``api_route`` builds a Starlette ``Route`` and records what the
OpenAPI spec says about it (``ApiInfo``: summary, body type, query parameters), so the served
spec is generated from the routes themselves and cannot drift from them.

Errors (``error_response``) are JSON ``{"reason": ...}`` with Pulsar's status codes: 404 missing,
409 exists / not empty / concurrent change, 412 invalid name or value, a bound reached or a
topic with clients attached, 400 a
body that does not decode, 503 metadata unavailable or broker not ready; anything else is a 500
(which the schemathesis test treats as a bug).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from magnetar.base.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    LimitExceededError,
    MagnetarError,
    NotFoundError,
)
from magnetar.base.limits import ADMIN_BODY_BYTES_MAX
from magnetar.base.types import TopicName
from magnetar.broker.errors import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.catalog.resources import ClusterNotAllowedError, NotEmptyError, Resources, TopicBusyError
from magnetar.catalog.schema import SchemaRefusedError
from magnetar.metadata.errors import MetadataUnavailableError, SessionExpiredError
from magnetar.protocol.pulsar import pb

log = logging.getLogger(__name__)
Handler = Callable[[Request], Awaitable[Response]]


class AdminError(MagnetarError):
    """A request the API refuses with ``status`` and ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class AdminContext:
    service: BrokerService
    cluster: str
    service_url: str = ""
    broker_service_url: str = ""
    #: This broker's ``https://`` web URL when it serves HTTPS, else "".
    service_url_tls: str = ""

    @property
    def resources(self) -> Resources:
        resources = self.service.resources
        if resources is None:
            raise AdminError(503, "the admin API needs a metadata store")
        return resources


@dataclass(frozen=True)
class ApiInfo:
    summary: str
    body: Any = None  # a msgspec type (Struct, int, bool, ...) or None
    query: tuple[tuple[str, str], ...] = ()  # (name, JSON schema type)
    body_required: bool = True
    responses: dict[str, str] = field(default_factory=dict)


def api_route(path: str, methods: list[str], summary: str, *, body: Any = None,
              query: tuple[tuple[str, str], ...] = (), body_required: bool = True) -> Callable[[Handler], Route]:
    """Decorator: the handler as a ``Route`` carrying its ``ApiInfo`` (``route.api``)."""

    def wrap(handler: Handler) -> Route:
        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as error:
                return error_response(error)

        guarded.__name__ = handler.__name__
        route = Route(path, guarded, methods=methods)
        route.api = ApiInfo(summary, body, query, body_required)  # type: ignore[attr-defined]
        return route

    return wrap


def error_response(error: BaseException) -> JSONResponse:
    status, reason = _status_of(error)
    if status >= 500 and status != 501:  # 501: a feature switched off (authorization), not a failure
        log.error("admin request failed: %s: %s", type(error).__name__, error, exc_info=error)
    return JSONResponse({"reason": reason}, status_code=status)


def _status_of(error: BaseException) -> tuple[int, str]:
    if isinstance(error, AdminError):
        return error.status, error.reason
    if isinstance(error, msgspec.MsgspecError):
        return 400, f"Invalid request body: {error}"
    if isinstance(error, BrokerError | SchemaRefusedError):
        return _BROKER_STATUS.get(error.code, 412), error.message
    if isinstance(error, NotFoundError):
        return 404, _message(error)
    if isinstance(error, ClusterNotAllowedError):
        return 403, _message(error)
    if isinstance(error, AlreadyExistsError | NotEmptyError | BadVersionError):
        return 409, _message(error)
    if isinstance(error, InvalidArgumentError | LimitExceededError | TopicBusyError):
        return 412, _message(error)
    if isinstance(error, MetadataUnavailableError | SessionExpiredError):
        return 503, _message(error)
    return 500, f"{type(error).__name__}: {error}"


def _message(error: BaseException) -> str:
    return str(error.args[0]) if error.args else type(error).__name__


_BROKER_STATUS: dict[int, int] = {pb.TopicNotFound: 404, pb.ServiceNotReady: 503, pb.PersistenceError: 500,
                  pb.ProducerBusy: 409, pb.ConsumerBusy: 409}


async def read_body(request: Request, kind: Any, *, required: bool = True) -> Any:
    """Decode the JSON body as ``kind`` (None if empty and not ``required``)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > ADMIN_BODY_BYTES_MAX:
        raise LimitExceededError("ADMIN_BODY_BYTES_MAX", int(declared), ADMIN_BODY_BYTES_MAX)
    raw = await request.body()
    if len(raw) > ADMIN_BODY_BYTES_MAX:
        raise LimitExceededError("ADMIN_BODY_BYTES_MAX", len(raw), ADMIN_BODY_BYTES_MAX)
    if not raw.strip():
        if required:
            raise AdminError(400, "Request body is required")
        return None
    return msgspec.json.decode(raw, type=kind)


def json_response(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status_code=status, media_type="application/json")


def no_content() -> Response:
    return Response(status_code=204)


def namespace_of(request: Request) -> str:
    tenant, namespace = request.path_params["tenant"], request.path_params["namespace"]
    Resources.split_namespace(f"{tenant}/{namespace}")
    return f"{tenant}/{namespace}"


def topic_of(request: Request) -> TopicName:
    """``persistent://{tenant}/{namespace}/{topic}`` from the path (the local name URL-decoded)."""
    namespace = namespace_of(request)
    local = unquote(request.path_params["topic"])
    return TopicName.parse(f"persistent://{namespace}/{local}")


def query_flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


def query_int(request: Request, name: str) -> int | None:
    text = request.query_params.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise AdminError(400, f"query parameter {name} must be an integer") from None
