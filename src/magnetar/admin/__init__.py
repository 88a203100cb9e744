"""The admin REST API: Pulsar's ``/admin/v2`` paths and JSON shapes over the broker.

Owns: the Starlette application (``build_admin_app``), one router per resource (clusters, tenants,
namespaces, namespace and topic policies, persistent topics, subscriptions), the stats documents,
and the OpenAPI spec generated from the routes. State lives in the broker (``BrokerService``: topics,
``PolicyCache``, ``Resources`` over the metadata store); handlers hold none. Errors are JSON
``{"reason": ...}`` with Pulsar's status codes (``common.error_response``).
"""

from magnetar.admin.app import ADMIN_PATH, ROUTERS, build_admin_app
from magnetar.admin.common import AdminContext, AdminError, api_route

__all__ = ["ADMIN_PATH", "ROUTERS", "AdminContext", "AdminError", "api_route", "build_admin_app"]
