"""`python -m flux7 …`: the same as the `flux7` command."""

from __future__ import annotations

import sys

from flux7.functions.entry import main

if __name__ == "__main__":
    sys.exit(main())
