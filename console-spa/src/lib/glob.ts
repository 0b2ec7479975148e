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

/** Why a pattern is not a valid glob (Go's filepath.Match reports ErrBadPattern; the server never matches it), or
 *  "" when it is. A malformed glob in a filter would otherwise look like "nothing matches". */
export function globProblem(pattern: string): string {
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "\\") {
      if (i + 1 >= pattern.length) return "ends with a lone \\ (escape a character after it, or remove it)";
      i++;
    } else if (c === "]") {
      continue; // a lone ] is an ordinary character
    } else if (c === "[") {
      let j = i + 1;
      if (pattern[j] === "^" || pattern[j] === "!") j++;
      if (pattern[j] === "]" || pattern[j] === "-") return `the class at position ${i + 1} is empty or starts with "${pattern[j]}"`;
      let closed = false;
      for (; j < pattern.length; j++) {
        if (pattern[j] === "\\") j++;
        else if (pattern[j] === "]") {
          closed = true;
          break;
        } else if (pattern[j] === "-" && (pattern[j + 1] === "]" || j + 1 >= pattern.length)) {
          return `the range at position ${j + 1} has no end`;
        }
      }
      if (!closed) return `the [ at position ${i + 1} is never closed with ]`;
      i = j;
    }
  }
  return "";
}
