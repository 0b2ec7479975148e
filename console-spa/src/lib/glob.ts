// Go filepath.Match semantics for policy tool globs (CONTRACT 1.18.5): `*` does not cross `/`,
// and a pattern also matches by plain equality.

const cache = new Map<string, RegExp | null>();

function compile(pattern: string): RegExp | null {
  let re = "^";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else if (c === "[") {
      const end = pattern.indexOf("]", i + 2);
      if (end < 0) return null;
      let body = pattern.slice(i + 1, end);
      if (body.startsWith("^")) body = "!" + body.slice(1);
      const negate = body.startsWith("!");
      if (negate) body = body.slice(1);
      re += `[${negate ? "^" : ""}${body.replace(/\\/g, "\\\\").replace(/\]/g, "\\]")}]`;
      i = end;
    } else if (c === "\\" && i + 1 < pattern.length) {
      re += pattern[++i]!.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    } else re += c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }
  try {
    return new RegExp(re + "$");
  } catch {
    return null;
  }
}

export function globMatch(pattern: string, name: string): boolean {
  if (pattern === name) return true;
  let re = cache.get(pattern);
  if (re === undefined) {
    re = compile(pattern);
    cache.set(pattern, re);
  }
  return re ? re.test(name) : false;
}
