"""Measurement beyond the IRT fit: item-level profiles, localized-improvement tests and the like.

Each module here is one concept and imports only from the data and IRT layers below it.
"""
