"""Scheduling: jobs, bounded queues, admission, race-free cancel, drain/reload, metrics."""

from .job import Job, JobArgs, JobState, new_job_id
from .metrics import MetricsRecorder
from .pool import DEFAULT_QUEUE_CAPACITY, Pool

__all__ = [
    "DEFAULT_QUEUE_CAPACITY",
    "Job",
    "JobArgs",
    "JobState",
    "MetricsRecorder",
    "Pool",
    "new_job_id",
]
