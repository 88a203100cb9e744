"""Advertised listeners (Pulsar's ``advertisedListeners`` and ``internalListenerName``).

A broker may be reached under several names (inside a cluster's network, from outside it):
``advertised_listeners`` lists them as Pulsar writes them,
``name:pulsar://host:port,name:pulsar+ssl://host:port,other:pulsar://...`` (a name may carry one
plain and one TLS URL). ``internal_listener_name`` names the one brokers and clients that ask for
no listener use (default: the first one). Without listeners the broker has one, named
``internal`` (or ``internal_listener_name``), at its advertised address.

A LOOKUP carries the client's ``advertised_listener_name`` ("" when it set none). The answer for a
topic this broker serves is that listener's URLs; a name the broker does not have is refused with
ServiceNotReady, as Pulsar answers ("the broker does not have {name} listener"), never the
default URL. A Redirect to the broker that owns the topic's bundle names that broker's listener
(its listeners are in its ownership node); a Redirect to a broker chosen to take a free bundle
keeps that broker's internal URL (its listeners are not known here): the client asks it again,
with the same name, and it answers with its own listener.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.base.errors import InvalidArgumentError

DEFAULT_INTERNAL_LISTENER = "internal"
_SCHEMES = ("pulsar://", "pulsar+ssl://")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    url: str | None  # pulsar://host:port
    url_tls: str | None  # pulsar+ssl://host:port


def parse_listeners(text: str) -> dict[str, Listener]:
    """``name:url,name:url,...`` into listeners by name (order kept); raises ``InvalidArgumentError``."""
    found: dict[str, dict[str, str]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        if not sep or not name or not url.startswith(_SCHEMES) or not url.partition("://")[2]:
            raise InvalidArgumentError(f"advertised listener {item!r} is not name:pulsar://host:port "
                                  f"or name:pulsar+ssl://host:port")
        kind = "tls" if url.startswith("pulsar+ssl://") else "plain"
        urls = found.setdefault(name, {})
        if kind in urls:
            raise InvalidArgumentError(f"advertised listener {name!r} has two {kind} URLs")
        urls[kind] = url
    return {name: Listener(name, urls.get("plain"), urls.get("tls")) for name, urls in found.items()}


class Listeners:
    """The listeners of one broker, and which one a LOOKUP asks for."""

    def __init__(self, advertised: str, internal_name: str, service_url: str) -> None:
        parsed = parse_listeners(advertised)
        if internal_name and parsed and internal_name not in parsed:
            raise InvalidArgumentError(f"internal listener {internal_name!r} is not among the advertised listeners")
        if not parsed:
            name = internal_name or DEFAULT_INTERNAL_LISTENER
            parsed = {name: Listener(name, service_url, None)}
        self.by_name = parsed
        self.internal = parsed[internal_name or next(iter(parsed))]

    def resolve(self, name: str) -> Listener | None:
        """The listener a LOOKUP naming ``name`` ("" none) is answered with; None: not here."""
        return self.internal if not name else self.by_name.get(name)
