"""The site around the lessons: one template with shared navigation, the course map, the pages
about this machine and the vocabulary, the not-found pages, and the router that picks a page from
the URL. The shell sits above the pages: it imports the lessons (and lessons.engine_check), and
nothing outside it imports the shell (tests/test_layering.py); what pages share lives in
widgets/ (widgets.html for the site's HTML panes)."""
