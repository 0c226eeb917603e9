"""Plots and reports."""
