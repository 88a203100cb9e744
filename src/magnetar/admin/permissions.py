"""Permission grants (Pulsar's paths), stored in the namespace's ``auth_policies``.

* ``GET /namespaces/{t}/{ns}/permissions``: role -> actions granted on the namespace;
* ``POST /namespaces/{t}/{ns}/permissions/{role}`` with a JSON array of actions (``produce``,
  ``consume``, ``functions``, ...): the role's actions become exactly these; ``DELETE``: revoked;
* ``GET /namespaces/{t}/{ns}/permissions/subscription``: subscription -> roles;
  ``POST|DELETE .../permissions/subscription/{sub}`` with a JSON array of roles: the subscription's
  role list becomes / loses these roles (``DELETE`` without a body clears it); Pulsar's
  ``DELETE .../permissions/{sub}/{role}`` revokes one role;
* ``GET /persistent/{t}/{ns}/{topic}/permissions``: the topic's grants merged over the
  namespace's (what a role holds there); ``POST|DELETE .../permissions/{role}``: grants on the topic.

Grants on a partitioned topic name cover its partitions. Changing grants answers 501 while
authorization is off, as Pulsar does; reading them always works. An unknown action is a 400.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin.common import (
    AdminContext,
    AdminError,
    api_route,
    json_response,
    namespace_of,
    no_content,
    read_body,
    topic_of,
)
from magnetar.admin.topics import require_namespace
from magnetar.catalog.policies import AuthPolicies, Policies
from magnetar.security.authorization import AuthAction

#: Longest role name a grant may name (a certificate subject or a token's claim fits easily).
ROLE_BYTES_MAX = 1024
#: Grants one namespace's ``auth_policies`` may hold in all (roles, topic grants, subscription
#: lists): its policies node stays well under a metadata node's size limit (ZooKeeper: 1 MiB).
PERMISSION_GRANTS_COUNT_MAX = 10_000

Actions = list[AuthAction]
Roles = list[str]


def _role(text: str) -> str:
    if not text or len(text.encode()) > ROLE_BYTES_MAX or not text.isprintable():
        raise AdminError(412, f"Invalid role name {text[:64]!r}: 1..{ROLE_BYTES_MAX} printable bytes")
    return text


def _sorted(actions: list[AuthAction]) -> list[AuthAction]:
    return sorted(set(actions), key=lambda a: a.value)


def _require_authorization(ctx: AdminContext) -> None:
    if not ctx.service.config.authorization_enabled:
        raise AdminError(501, "Authorization is not enabled")


async def _roles_body(request: Request, *, required: bool) -> list[str] | None:
    roles: list[str] | None = await read_body(request, Roles, required=required)
    if roles is not None:
        if len(roles) > PERMISSION_GRANTS_COUNT_MAX:
            raise AdminError(412, f"at most {PERMISSION_GRANTS_COUNT_MAX} roles (PERMISSION_GRANTS_COUNT_MAX)")
        for role in roles:
            _role(role)
    return roles


def _bounded(auth: AuthPolicies) -> None:
    total = (len(auth.namespace_auth) + sum(len(roles) for roles in auth.subscription_auth_roles.values())
             + sum(len(grants) for grants in auth.destination_auth.values()))
    if total > PERMISSION_GRANTS_COUNT_MAX:
        raise AdminError(412, f"at most {PERMISSION_GRANTS_COUNT_MAX} grants per namespace (PERMISSION_GRANTS_COUNT_MAX)")


def namespace_routes(ctx: AdminContext) -> list[BaseRoute]:
    base = "/namespaces/{tenant}/{namespace}/permissions"

    @api_route(base, ["GET"], "Get the namespace's permissions (role -> actions)")
    async def get_permissions(request: Request) -> Response:
        policies = await ctx.resources.policies(namespace_of(request))
        return json_response(policies.auth_policies.namespace_auth)

    @api_route(f"{base}/{{role}}", ["POST"], "Grant a role actions on the namespace", body=Actions)
    async def grant(request: Request) -> Response:
        _require_authorization(ctx)
        role = _role(request.path_params["role"])
        actions = await read_body(request, Actions)
        assert actions is not None

        def apply(p: Policies) -> None:
            p.auth_policies.namespace_auth[role] = _sorted(actions)
            _bounded(p.auth_policies)

        await ctx.resources.update_policies(namespace_of(request), apply)
        return no_content()

    @api_route(f"{base}/{{role}}", ["DELETE"], "Revoke a role's permissions on the namespace")
    async def revoke(request: Request) -> Response:
        _require_authorization(ctx)
        role = _role(request.path_params["role"])

        def apply(p: Policies) -> None:
            p.auth_policies.namespace_auth.pop(role, None)

        await ctx.resources.update_policies(namespace_of(request), apply)
        return no_content()

    # The subscription routes go before ``{base}/{role}``: ``.../permissions/subscription/{sub}``
    # must not be read as a role named "subscription".
    return [get_permissions, *_subscription_routes(ctx, base), grant, revoke]


def _subscription_routes(ctx: AdminContext, base: str) -> list[BaseRoute]:
    """Subscription-level grants: which roles may use a subscription name."""

    @api_route(f"{base}/subscription", ["GET"], "Get the subscription permissions (subscription -> roles)")
    async def get_subscription_permissions(request: Request) -> Response:
        policies = await ctx.resources.policies(namespace_of(request))
        return json_response(policies.auth_policies.subscription_auth_roles)

    @api_route(f"{base}/subscription/{{subscription}}", ["POST"],
               "Set the roles that may use a subscription", body=Roles)
    async def grant_subscription(request: Request) -> Response:
        _require_authorization(ctx)
        namespace = namespace_of(request)
        subscription = request.path_params["subscription"]
        roles = await _roles_body(request, required=True)
        assert roles is not None

        def grant(p: Policies) -> None:
            p.auth_policies.subscription_auth_roles[subscription] = sorted(set(roles))
            _bounded(p.auth_policies)

        await ctx.resources.update_policies(namespace, grant)
        return no_content()

    @api_route(f"{base}/subscription/{{subscription}}", ["DELETE"],
               "Remove roles (default: all) from a subscription's role list", body=Roles, body_required=False)
    async def revoke_subscription(request: Request) -> Response:
        _require_authorization(ctx)
        roles = await _roles_body(request, required=False)
        await _revoke_subscription_roles(ctx, namespace_of(request), request.path_params["subscription"], roles)
        return no_content()

    @api_route(f"{base}/{{subscription}}/{{role}}", ["DELETE"], "Revoke one role's use of a subscription")
    async def revoke_subscription_role(request: Request) -> Response:
        _require_authorization(ctx)
        role = _role(request.path_params["role"])
        await _revoke_subscription_roles(ctx, namespace_of(request), request.path_params["subscription"], [role])
        return no_content()

    return [get_subscription_permissions, grant_subscription, revoke_subscription, revoke_subscription_role]



async def _revoke_subscription_roles(ctx: AdminContext, namespace: str, subscription: str,
                                     roles: list[str] | None) -> None:
    def apply(p: Policies) -> None:
        held = p.auth_policies.subscription_auth_roles
        if subscription not in held:
            raise AdminError(404, f"Subscription {subscription} has no permissions set")
        remaining = [] if roles is None else sorted(set(held[subscription]) - set(roles))
        if remaining:
            held[subscription] = remaining
        else:
            del held[subscription]

    await ctx.resources.update_policies(namespace, apply)


def topic_routes(ctx: AdminContext) -> list[BaseRoute]:
    base = "/persistent/{tenant}/{namespace}/{topic}/permissions"

    @api_route(base, ["GET"], "Get the permissions on a topic (namespace grants merged with the topic's)")
    async def get_permissions(request: Request) -> Response:
        topic = topic_of(request)
        auth = (await ctx.resources.policies(topic.namespace)).auth_policies
        merged = {role: list(actions) for role, actions in auth.namespace_auth.items()}
        for role, actions in auth.destination_auth.get(str(topic.partitioned_topic_name), {}).items():
            merged[role] = _sorted([*merged.get(role, []), *actions])
        return json_response(merged)

    @api_route(f"{base}/{{role}}", ["POST"], "Grant a role actions on a topic", body=Actions)
    async def grant(request: Request) -> Response:
        _require_authorization(ctx)
        topic = topic_of(request).partitioned_topic_name
        role = _role(request.path_params["role"])
        actions = await read_body(request, Actions)
        assert actions is not None
        await require_namespace(ctx, topic.namespace)

        def apply(p: Policies) -> None:
            p.auth_policies.destination_auth.setdefault(str(topic), {})[role] = _sorted(actions)
            _bounded(p.auth_policies)

        await ctx.resources.update_policies(topic.namespace, apply)
        return no_content()

    @api_route(f"{base}/{{role}}", ["DELETE"], "Revoke a role's permissions on a topic")
    async def revoke(request: Request) -> Response:
        _require_authorization(ctx)
        topic = topic_of(request).partitioned_topic_name
        role = _role(request.path_params["role"])

        def apply(p: Policies) -> None:
            grants = p.auth_policies.destination_auth.get(str(topic), {})
            if role not in grants:
                raise AdminError(412, f"Permissions are not set at the topic level for {role}")
            del grants[role]
            if not grants:
                del p.auth_policies.destination_auth[str(topic)]

        await ctx.resources.update_policies(topic.namespace, apply)
        return no_content()

    return [get_permissions, grant, revoke]
