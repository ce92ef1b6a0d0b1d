"""The course's pages: one module per lesson (registered in lessons.registry) and the engine
check (lessons.engine_check), on a shared base (lessons.base: URL state, start on load); how a
page runs its engine jobs (lessons.job_runner, lessons.session_jobs) and checks typed numbers
(lessons.number_input); above them the site's shell (lessons.shell: router, template, index,
about, vocabulary, not-found pages), which the pages never import."""
