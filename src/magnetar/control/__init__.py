"""The cluster control plane: which broker serves which namespace bundle, and moving bundles.

``bundles`` (the hash ranges of topic names), ``load`` (the load report each broker publishes),
``ownership`` (bundle locks, the LOOKUP answers of a cluster broker, unload and split),
``balancer`` (the pure decision: which bundles to split or move) and ``leader`` (the elected
broker that carries those decisions out through the owners).

It drives the data plane (``magnetar.broker``: it closes a bundle's topics when the bundle leaves)
and is not imported by it: the control plane sits above the broker, below the admin API and the
node that assembles a broker.
"""
