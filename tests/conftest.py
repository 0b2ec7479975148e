from __future__ import annotations

import logging

# Request lines from httpx drown the failure output; keep warnings and errors only.
logging.getLogger("httpx").setLevel(logging.WARNING)
