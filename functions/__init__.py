"""The HTTP edge: thin Litestar handlers, one module per endpoint family. Imported as `flux7.functions` only
(CONTRIBUTING.md, "One import name")."""

if __name__ != "flux7.functions":
    # As shared/__init__.py: the checkout's root on sys.path must not give this folder a second import name.
    raise ImportError(
        f"flux7's HTTP edge is imported as flux7.functions, not as {__name__!r}: write `flux7.functions.…` "
        f"(e.g. `from flux7.functions.app import create_app`); see CONTRIBUTING.md, 'One import name'",
        name=__name__,
    )
