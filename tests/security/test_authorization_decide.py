"""``security.authorization.decide``: exhaustive over a small universe, against a spec written apart.

The universe: 4 roles (plus no role), every ``Need``, every way the roles can appear among the
superusers, the tenant admins, the namespace grants, the topic grants and a subscription role list
(grants drawn from {}, {produce}, {consume}, {produce, consume}, {functions}). The spec below is the
rule table as Pulsar states it, written as one boolean formula per need, not as ``decide``'s
early-return chain. Hypothesis then checks properties over arbitrary roles and grants.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.security.authorization import AuthAction, Grants, Need, decide

P, C, F = AuthAction.PRODUCE, AuthAction.CONSUME, AuthAction.FUNCTIONS
ACTION_SETS = [frozenset(), frozenset({P}), frozenset({C}), frozenset({P, C}), frozenset({F})]
ROLES = ["r0", "r1", "anonymous"]


def spec(role: str | None, need: Need, g: Grants) -> bool:
    if role is None:
        return False
    superuser = role in g.superuser_roles
    admin = superuser or role in g.tenant_admin_roles
    ns = g.namespace_actions.get(role, frozenset())
    held = ns | g.topic_actions.get(role, frozenset())
    sub_ok = not g.subscription_roles or role in g.subscription_roles
    return {
        Need.SUPERUSER: superuser,
        Need.AUTHENTICATED: True,
        Need.TENANT_ADMIN: admin,
        Need.NAMESPACE_CONSUME: admin or C in ns,
        Need.LOOKUP: admin or P in held or C in held,
        Need.PRODUCE: admin or P in held,
        Need.CONSUME: admin or (C in held and sub_ok),
    }[need]


def _subsets(items: list[str]) -> list[frozenset[str]]:
    return [frozenset(c) for n in range(len(items) + 1) for c in itertools.combinations(items, n)]


def _universe() -> list[Grants]:
    """Grants where the role under test ("r0") takes every position; other roles fill some."""
    out = []
    for supers, admins, subs in itertools.product(_subsets(["r0", "r1"]), _subsets(["r0", "r1"]),
                                                   [frozenset(), frozenset({"r0"}), frozenset({"r1"})]):
        for ns_r0, tp_r0 in itertools.product(ACTION_SETS, ACTION_SETS):
            for other in (frozenset(), frozenset({P, C})):  # another role's grants never leak to r0
                out.append(Grants(supers, admins, {"r0": ns_r0, "r1": other}, {"r0": tp_r0, "anonymous": other},
                                  subs))
    return out


def test_decide_matches_the_spec_exhaustively() -> None:
    cases = 0
    for grants in _universe():
        for role in [*ROLES, None]:
            for need in Need:
                got = decide(role, need, grants)
                assert got.allowed == spec(role, need, grants), (role, need, grants, got.reason)
                assert got.reason
                cases += 1
    assert cases > 50_000


def test_the_spec_itself_would_catch_a_leak() -> None:
    """Negative control: a decide that forgets the subscription role list disagrees with the spec."""

    def leaky(role: str | None, need: Need, g: Grants) -> bool:
        return decide(role, Need.LOOKUP if need is Need.CONSUME else need, g).allowed

    disagreements = sum(leaky(role, need, g) != spec(role, need, g)
                        for g in _universe() for role in ROLES for need in Need)
    assert disagreements > 0


def test_examples_with_reasons() -> None:
    g = Grants(frozenset({"root"}), frozenset({"admin"}), {"app": frozenset({P})}, {"reader": frozenset({C})},
               frozenset({"other"}))
    assert decide("root", Need.SUPERUSER, g).allowed
    assert not decide("admin", Need.SUPERUSER, g).allowed
    assert decide("admin", Need.CONSUME, g).allowed  # a tenant admin bypasses subscription role lists
    assert decide("app", Need.LOOKUP, g).allowed
    assert not decide("app", Need.CONSUME, g).allowed
    refused = decide("reader", Need.CONSUME, g)
    assert not refused.allowed and "subscription" in refused.reason
    assert not decide(None, Need.AUTHENTICATED, g).allowed
    assert decide(None, Need.AUTHENTICATED, g).reason == "Authentication required"


roles = st.sampled_from(["a", "b", "c", "anonymous", ""])
action_sets = st.frozensets(st.sampled_from(list(AuthAction)))
grants = st.builds(Grants, st.frozensets(roles), st.frozensets(roles), st.dictionaries(roles, action_sets),
                   st.dictionaries(roles, action_sets), st.frozensets(roles))


@settings(max_examples=150, deadline=None)
@given(st.one_of(roles, st.none()), st.sampled_from(list(Need)), grants, roles, action_sets)
def test_more_grants_never_take_rights_away(role: str | None, need: Need, g: Grants, who: str,
                                            extra: frozenset[AuthAction]) -> None:
    before = decide(role, need, g).allowed
    wider_ns = dict(g.namespace_actions)
    wider_ns[who] = wider_ns.get(who, frozenset()) | extra
    wider_tp = dict(g.topic_actions)
    wider_tp[who] = wider_tp.get(who, frozenset()) | extra
    for wider in (Grants(g.superuser_roles | {who}, g.tenant_admin_roles, g.namespace_actions, g.topic_actions,
                         g.subscription_roles),
                  Grants(g.superuser_roles, g.tenant_admin_roles | {who}, g.namespace_actions, g.topic_actions,
                         g.subscription_roles),
                  Grants(g.superuser_roles, g.tenant_admin_roles, wider_ns, wider_tp, g.subscription_roles)):
        assert decide(role, need, wider).allowed >= before


@settings(max_examples=150, deadline=None)
@given(st.one_of(roles, st.none()), st.sampled_from(list(Need)), grants)
def test_superusers_may_all_and_no_role_may_nothing(role: str | None, need: Need, g: Grants) -> None:
    assert decide(role, need, g).allowed == spec(role, need, g)
    if role is not None and role in g.superuser_roles:
        assert decide(role, need, g).allowed
    assert not decide(None, need, g).allowed
