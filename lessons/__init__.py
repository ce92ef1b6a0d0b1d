"""The course's pages: one module per lesson (registered in lessons.registry), the shared
lesson base (lessons.base), and the site shell (lessons.shell: template, index, about,
vocabulary, not-found pages)."""
