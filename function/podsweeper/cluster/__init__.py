"""The only layer that touches a cluster: one protocol, two implementations.

`podsweeper.cluster.kube` talks to a real API server; `podsweeper.cluster.simulated` is the
in-memory cluster the replay builds from recorded events.
"""
