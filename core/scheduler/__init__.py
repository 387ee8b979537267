"""Scheduling: jobs, bounded queues, admission, race-free cancel, drain/reload, metrics."""

from .job import Job, JobState, PreparedJob, new_job_id
from .metrics import MetricsRecorder
from .pool import DEFAULT_QUEUE_CAPACITY, Pool

__all__ = [
    "DEFAULT_QUEUE_CAPACITY",
    "Job",
    "JobState",
    "MetricsRecorder",
    "Pool",
    "PreparedJob",
    "new_job_id",
]
