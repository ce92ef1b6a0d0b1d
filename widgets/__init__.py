"""Reusable Panel/Bokeh components that draw measurements; no engine logic lives here."""
