"""The package's version, on the ground floor so that any room can name it without
importing the public namespace (``rsr_async/__init__.py`` imports every room)."""

__version__ = "0.1.0"
