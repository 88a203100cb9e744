"""The catalog: what exists in a Pulsar cluster and how it is configured, as the brokers share it.

Clusters, tenants and namespaces (``resources``), namespace and topic policies and their watched
cache (``policies``), the schema registry and its compatibility rules (``schema``,
``schema_compat``), partition counts and the shape of a LOOKUP answer (``lookup``), and the
advertised listeners (``listeners``). All of it lives in the metadata store at Pulsar's paths.

The data plane (``magnetar.broker``) reads the catalog (a topic resolves its effective policies, a
session registers schemas and answers lookups), so the catalog sits below it and never imports
it: the broker settings it needs arrive as a ``BrokerSettings`` (the broker's config is one), and
a schema the registry refuses is a ``SchemaRefusedError`` carrying the Pulsar ``ServerError`` code.
"""
