"""`serve`: a local web page that follows run folders as they grow (README "Watch a run").

  follow.py   a run folder as last seen, re-reading only what changed
  views.py    the JSON views of a run (summary, lineage tree, one kernel, memory)
  server.py   the HTTP server: the views under /api/, the page from static/
  static/     the page: HTML, CSS and JavaScript shipped with the package (no network)
"""
