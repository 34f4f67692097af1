"""The only layer that touches a cluster: one protocol, two implementations.

`function.cluster.kube` talks to a real API server; `function.cluster.simulated` is the
in-memory cluster the replay builds from recorded events.
"""
