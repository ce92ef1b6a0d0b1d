"""The measurement service: the worker process that runs engine jobs one at a time and its thin
client for the web process (service), the job registry and the engine jobs (jobs and the *_jobs
modules)."""
