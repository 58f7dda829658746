"""What a run folder shows a person: report.md (markdown.py), its plots (plots.py) and the live
page (serve/). Exports: markdown.write_report, markdown.collect, serve.server.start.
"""
