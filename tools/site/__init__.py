"""The course website: `make site` (build.py), its explorers (explorers.py), the results tables (results.py)."""
