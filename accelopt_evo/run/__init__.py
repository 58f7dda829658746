"""A run's data: its configuration (config.py, presets/), its folder (folder.py) and the formats
of what it writes (records.py, files.py), and the user's own problems staged into it.
"""
