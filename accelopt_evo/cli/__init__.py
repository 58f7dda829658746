"""The command line: argument parsing and the commands that are not a run (doctor, measure, the
problems listing). Exports: main.main (the entry point), doctor.diagnose, measure.measure, listing.problem_rows.
"""
