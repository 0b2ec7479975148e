"""SQLite-flavoured SQL to psycopg's: `?` becomes `%s`, `:name` becomes `%(name)s`, a literal `%` is doubled.

Quoted strings, quoted identifiers and comments are copied untouched, so a `?` or `%` inside them stays as is."""

from __future__ import annotations

from functools import lru_cache

__all__ = ["translate"]


@lru_cache(maxsize=2048)
def translate(sql: str, named: bool) -> str:
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:  # '' inside a string
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i : j + 1].replace("%", "%%"))
            i = j + 1
        elif c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j].replace("%", "%%"))
            i = j
        elif c == "?":
            out.append("%s")
            i += 1
        elif c == "%":
            out.append("%%")
            i += 1
        elif c == ":" and named and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_") and sql[i - 1 : i] != ":":
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            out.append(f"%({sql[i + 1 : j]})s")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)
