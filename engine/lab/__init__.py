"""The measurement service: the web process submits jobs, one worker process runs them.

The web process imports only the torch-free part: `client` (EngineService, get_service),
`events` (Job, JobEvent), `registry` (every job kind: its parameters, declared with `params`,
and whether it is cacheable), `results` (one typed record per kind) and `cache` (the
measurement cache). The worker process runs `worker`, which imports the job bodies in `jobs/`
(grouped by what they run) by the import path the registry names.
"""
