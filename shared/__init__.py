"""flux7 core: the domain, with no web-framework imports. Imported as `flux7.shared` only (CONTRIBUTING.md,
"One import name")."""

if __name__ != "flux7.shared":
    # A checkout's root on sys.path (pytest's `pythonpath`, `python -c` in the repository) makes this folder
    # importable as top-level `shared` too: every module would load twice, as two sets of classes.
    raise ImportError(
        f"flux7's core is imported as flux7.shared, not as {__name__!r}: write `flux7.shared.…` "
        f"(e.g. `from flux7.shared.errors import ConfigError`); see CONTRIBUTING.md, 'One import name'",
        name=__name__,
    )

__version__ = "0.1.0"
