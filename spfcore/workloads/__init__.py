"""Request model, workload generators and trace readers/writers."""

from spfcore.workloads.model import Request, Workload, block_keys, request_view

__all__ = ["Request", "Workload", "block_keys", "request_view"]
