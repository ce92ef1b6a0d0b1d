"""The site around the lessons: one template with shared navigation, the course map, the pages
about this machine and the vocabulary, the engine check, the not-found pages, and the router
that picks a page from the URL."""
