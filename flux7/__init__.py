"""flux7: govern what AI agents do with their tools and remember what happened.

The one import package the distribution installs. In the repository its sub-packages and data are symlinks to
the top-level folders (`shared/`, `functions/`, `migrations/`, `policies/`, and `console-spa/dist` as
`console/`), so a checkout and an installed wheel resolve `flux7.shared…` and `flux7/migrations/…` alike.
"""

from .shared import __version__

__all__ = ["__version__"]
