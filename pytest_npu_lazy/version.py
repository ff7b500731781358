"""The plugin's version, at the bottom of the package: the reports write it, and the package re-exports it."""

__version__ = "0.1.0"
