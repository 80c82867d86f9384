"""The Ray Serve transport: ingress and model replicas, the cluster board, the shared Responses store actor."""
