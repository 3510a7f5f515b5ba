"""What the tools show: tables, CSV and JSON of predictions, and figures.

Formatting only: data in, text or a PNG out. Imports: ``contracts``,
``engine.sweep`` (the rows ``tables`` formats), numpy, pandas and matplotlib
(lazily, when a figure is drawn).
"""
