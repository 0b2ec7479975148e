// Where in a policy file the server's fault is. The server names a line for a YAML syntax error
// ("(yaml): line 4, column 11: …") and a key path for a fault of the policy itself ("rules[1].action: …",
// "rules[0]: Object contains unknown field `actoin`"); the editor marks that line.

export type KeyPath = (string | number)[];

/** `rules[1].action` → ["rules", 1, "action"]; "(top level)" and "(yaml)" → []. */
export function keyPath(key: string): KeyPath {
  if (!key || key.startsWith("(")) return [];
  const out: KeyPath = [];
  for (const m of key.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) out.push(m[2] !== undefined ? Number(m[2]) : m[1]!);
  return out;
}

interface Line {
  no: number; // 1-based
  indent: number;
  text: string; // without the indentation
}

function significant(text: string): Line[] {
  return text
    .split("\n")
    .map((raw, i) => ({ no: i + 1, indent: raw.length - raw.trimStart().length, text: raw.trim() }))
    .filter((l) => l.text && !l.text.startsWith("#"));
}

/** A line's key, and the column it sits at (a `- key:` line holds the first key of a sequence item). */
function keyOf(l: Line): { key: string; at: number } | null {
  let t = l.text;
  let at = l.indent;
  if (t.startsWith("- ")) {
    const rest = t.slice(2);
    at += 2 + (rest.length - rest.trimStart().length);
    t = rest.trimStart();
  }
  const m = /^(["']?)([^"':#]+)\1\s*:(\s|$)/.exec(t);
  return m ? { key: m[2]!.trim(), at } : null;
}

/** The line of a key path in block-style YAML: as deep as the text lets it be followed (a flow mapping on one
 *  line holds the rest of the path), or null when not even its first key is there. */
export function lineOfKey(text: string, path: KeyPath): number | null {
  const ls = significant(text);
  let start = 0;
  let end = ls.length;
  let found: number | null = null;
  for (const seg of path) {
    if (typeof seg === "string") {
      let hit = -1;
      let childAt = -1;
      for (let i = start; i < end; i++) {
        const k = keyOf(ls[i]!);
        if (!k) continue;
        if (childAt < 0) childAt = k.at; // the region's keys sit at its first key's column
        if (k.at === childAt && k.key === seg) {
          hit = i;
          break;
        }
      }
      if (hit < 0) return found;
      const line = ls[hit]!;
      const at = keyOf(line)!.at;
      found = line.no;
      // The value: the lines indented deeper, or a sequence whose dashes sit at the key's own column.
      let stop = hit + 1;
      while (stop < end && (ls[stop]!.indent > at || (ls[stop]!.indent === at && ls[stop]!.text.startsWith("-")))) stop++;
      start = hit + 1;
      end = stop;
    } else {
      const dashes = ls.slice(start, end).filter((l) => l.text === "-" || l.text.startsWith("- "));
      const col = Math.min(...dashes.map((l) => l.indent));
      const items = dashes.filter((l) => l.indent === col);
      const item = items[seg];
      if (!item) return found;
      found = item.no;
      const from = ls.indexOf(item);
      const next = items[seg + 1];
      start = from;
      end = next ? ls.indexOf(next) : end;
    }
  }
  return found;
}

export interface Fault {
  error: string;
  key?: string;
}

/** The line the server's fault names: its own "line N", else the line of its key path (and of the unknown field
 *  it names, when it names one). Null when neither can be found in the text. */
export function faultLine(text: string, fault: Fault): number | null {
  const named = /\bline (\d+)\b/.exec(fault.error);
  if (named) return Number(named[1]);
  const path = keyPath(fault.key ?? fault.error.split(": ")[0] ?? "");
  const unknown = /unknown field [`'"]([^`'"]+)[`'"]/.exec(fault.error);
  if (unknown) path.push(unknown[1]!);
  return path.length ? lineOfKey(text, path) : null;
}
