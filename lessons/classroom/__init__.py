"""Class mode: the class run's pages, and the class's records (predictions, shown measurements,
answers) kept in SQLite with each reader's report."""
