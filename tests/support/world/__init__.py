"""The real Kubeflow world (operator, controller manager, scheduler, kwok nodes) for the test cluster."""
