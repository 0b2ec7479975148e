"""flux7 core: the domain, with no web-framework imports."""

__version__ = "0.1.0"
