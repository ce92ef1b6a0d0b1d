"""The course's pages: one module per lesson (registered in lessons.registry), the engine check
(lessons.engine_check), the shared page base (lessons.base), and above them the site's shell
(lessons.shell: router, template, index, about, vocabulary, not-found pages)."""
