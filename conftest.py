# Loads the course's nbval rules (stderr skipped, last-digit tolerance) for every pytest run.
pytest_plugins = ["tools.testing.nbval_plugin"]
