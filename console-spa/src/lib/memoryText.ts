// Parsers for mem7's text outputs (CONTRACT 2.3). The console has only these texts to go on, so the
// formats are part of the contract; every parser accepts the "No memories found." family as empty.

export interface MemoryBlock {
  key: string;
  value: string;
  tags: string[];
  agent: string;
  updated: string;
}

export interface MemoryListItem {
  key: string;
  tags: string[];
  agent: string;
  updated: string;
}

export interface HistoryEvent {
  when: string;
  /** store | update | delete | delete by tags */
  what: string;
  /** Tags of a delete-by-tags event. */
  tags: string[];
  agent: string;
  valid: string;
  trace: string;
  /** First 12 hex of the seal, "" when unsealed. */
  seal: string;
  unsealed: boolean;
}

export interface SearchResult {
  count: number;
  blocks: MemoryBlock[];
}

export interface HistoryResult {
  key: string;
  count: number;
  events: HistoryEvent[];
}

const EMPTY_TEXTS = /^(No memories found\.|No matching memories found\.|No history\.)\s*$/;
const UPDATED_LINE = /^Updated: (\S+)$/;
const EM_DASH = " \u2014 ";

export function isEmptyText(text: string): boolean {
  return EMPTY_TEXTS.test(text.trim());
}

function splitTags(s: string): string[] {
  return s
    .split(",")
    .map((t) => t.trim())
    .filter(Boolean);
}

/**
 * Blocks of `## <key>\n<value>[\n]Tags: a, b\nAgent: x\nUpdated: <ts>\n\n` (recall and search).
 * A block ends at an `Updated:` line followed by a blank line and then the next `## ` heading or the end,
 * so values may hold blank lines, headings or an `Updated:` line of their own.
 */
export function parseMemoryBlocks(text: string): MemoryBlock[] {
  if (isEmptyText(text)) return [];
  const lines = text.replace(/\r\n/g, "\n").split("\n");
  const blocks: MemoryBlock[] = [];
  let i = 0;
  while (i < lines.length && !lines[i]!.startsWith("## ")) i++;
  while (i < lines.length) {
    const key = lines[i]!.slice(3);
    const body: string[] = [];
    let updated = "";
    let j = i + 1;
    for (; j < lines.length; j++) {
      const m = UPDATED_LINE.exec(lines[j]!);
      if (m) {
        const next = lines[j + 1];
        const after = lines[j + 2];
        const atEnd = next === undefined || (next === "" && (after === undefined || after.startsWith("## ") || lines.slice(j + 2).every((l) => l === "")));
        if (atEnd) {
          updated = m[1]!;
          break;
        }
      }
      body.push(lines[j]!);
    }
    let agent = "";
    let tags: string[] = [];
    if (body.length && body[body.length - 1]!.startsWith("Agent: ")) agent = body.pop()!.slice(7).trim();
    if (body.length && body[body.length - 1]!.startsWith("Tags: ")) tags = splitTags(body.pop()!.slice(6));
    blocks.push({ key, value: body.join("\n"), tags, agent, updated });
    // Skip the blank separator and move to the next heading.
    i = j + 1;
    while (i < lines.length && !lines[i]!.startsWith("## ")) i++;
  }
  return blocks;
}

/** memory_search: `<N> results (ranked by relevance):\n\n` + blocks, or `No memories found.` */
export function parseSearch(text: string): SearchResult {
  if (isEmptyText(text)) return { count: 0, blocks: [] };
  const m = /^(\d+) results? \(ranked by relevance\):\n/.exec(text.replace(/\r\n/g, "\n"));
  const blocks = parseMemoryBlocks(m ? text.slice(m[0].length) : text);
  return { count: m ? Number(m[1]) : blocks.length, blocks };
}

/** memory_recall: blocks, newest first, or `No memories found.` */
export function parseRecall(text: string): MemoryBlock[] {
  return parseMemoryBlocks(text);
}

/** One `- <key>[ [t1, t2]][ (by <agent>)] — <RFC3339Z>` line, read from the right so keys may hold anything. */
export function parseListLine(line: string): MemoryListItem | null {
  if (!line.startsWith("- ")) return null;
  const cut = line.lastIndexOf(EM_DASH);
  if (cut < 0) return null;
  const updated = line.slice(cut + EM_DASH.length).trim();
  let left = line.slice(2, cut);
  let agent = "";
  let tags: string[] = [];
  if (left.endsWith(")")) {
    const at = left.lastIndexOf(" (by ");
    if (at >= 0) {
      agent = left.slice(at + 5, -1);
      left = left.slice(0, at);
    }
  }
  if (left.endsWith("]")) {
    const at = left.lastIndexOf(" [");
    if (at >= 0) {
      tags = splitTags(left.slice(at + 2, -1));
      left = left.slice(0, at);
    }
  }
  return { key: left, tags, agent, updated };
}

/** memory_list: `<N> memories:\n- …` or `No memories found.` */
export function parseList(text: string): MemoryListItem[] {
  if (isEmptyText(text)) return [];
  const out: MemoryListItem[] = [];
  for (const line of text.replace(/\r\n/g, "\n").split("\n")) {
    const item = parseListLine(line);
    if (item) out.push(item);
  }
  return out;
}

/** One history line: `- <ts> <what>[ by <agent>][ · valid …][ · trace <id>][ · seal <hex>| · unsealed (…)]`. */
export function parseHistoryLine(line: string): HistoryEvent | null {
  if (!line.startsWith("- ")) return null;
  const parts = line.slice(2).split(" \u00b7 ");
  const head = parts.shift()!;
  const sp = head.indexOf(" ");
  if (sp < 0) return null;
  const when = head.slice(0, sp);
  let rest = head.slice(sp + 1);
  let what = rest;
  let agent = "";
  let tags: string[] = [];
  if (rest.startsWith("delete by tags ")) {
    what = "delete by tags";
    rest = rest.slice("delete by tags ".length);
    const by = rest.lastIndexOf(" by ");
    if (by >= 0) {
      agent = rest.slice(by + 4);
      rest = rest.slice(0, by);
    }
    tags = splitTags(rest);
  } else {
    const by = rest.indexOf(" by ");
    if (by >= 0) {
      what = rest.slice(0, by);
      agent = rest.slice(by + 4);
    }
  }
  const ev: HistoryEvent = { when, what, tags, agent, valid: "", trace: "", seal: "", unsealed: false };
  for (const p of parts) {
    if (p.startsWith("valid ")) ev.valid = p.slice(6);
    else if (p.startsWith("trace ")) ev.trace = p.slice(6);
    else if (p.startsWith("seal ")) ev.seal = p.slice(5);
    else if (p.startsWith("unsealed")) ev.unsealed = true;
  }
  return ev;
}

/** memory_history: `History of <key> (<n> events, oldest first):\n- …` or `No history.` */
export function parseHistory(text: string): HistoryResult {
  const normal = text.replace(/\r\n/g, "\n");
  if (isEmptyText(normal)) return { key: "", count: 0, events: [] };
  const lines = normal.split("\n");
  const m = /^History of (.*) \((\d+) events?, oldest first\):$/.exec(lines[0] ?? "");
  const events = lines
    .slice(m ? 1 : 0)
    .map(parseHistoryLine)
    .filter((e): e is HistoryEvent => e !== null);
  return { key: m ? m[1]! : "", count: m ? Number(m[2]) : events.length, events };
}

/** memory_forget: `Removed <n> memory(ies). <remaining> remaining.` or `No matching memories found.` */
export function parseForget(text: string): { removed: number; remaining: number | null } {
  const m = /^Removed (\d+) memory\(ies\)\. (\d+) remaining\./.exec(text.trim());
  return m ? { removed: Number(m[1]), remaining: Number(m[2]) } : { removed: 0, remaining: null };
}

/** memory_store: `Memory '<key>' created|updated (<N> total entries)`. */
export function parseStore(text: string): { key: string; created: boolean; total: number } | null {
  const m = /^Memory '(.*)' (created|updated) \((\d+) total entries\)/.exec(text.trim());
  return m ? { key: m[1]!, created: m[2] === "created", total: Number(m[3]) } : null;
}

/**
 * A decision memory written by the mesh (CONTRACT 1.16) or by sup7 (a JSON string):
 * `<approved|rejected|timed out> by <who> — agent:<a> tool:<t>[ reason:<r>]`.
 */
export interface DecisionRecord {
  outcome: string;
  by: string;
  agent: string;
  tool: string;
  reason: string;
}

export function parseDecisionValue(value: string): DecisionRecord | null {
  const v = value.trim();
  const m = /^(approved|rejected|timed out) by (.*?) \u2014 agent:(\S*) tool:(\S*)(?: reason:([\s\S]*))?$/.exec(v);
  if (m) return { outcome: m[1]!, by: m[2]!, agent: m[3]!, tool: m[4]!, reason: m[5] ?? "" };
  if (v.startsWith("{")) {
    try {
      const j = JSON.parse(v) as Record<string, unknown>;
      if (typeof j.decision === "string") {
        return {
          outcome: j.decision,
          by: typeof j.rule_matched === "string" && j.rule_matched ? `supervisor (${j.rule_matched})` : "supervisor",
          agent: String(j.agent_id ?? ""),
          tool: String(j.tool ?? ""),
          reason: String(j.reasoning ?? ""),
        };
      }
    } catch {
      return null;
    }
  }
  return null;
}
