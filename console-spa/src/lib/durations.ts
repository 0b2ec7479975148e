// Go duration strings ("4m59s", "1h0m0s", "350ms") as the mesh writes `remaining`.

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, "μs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds, or null when the text is not a Go duration. */
export function parseGoDuration(text: string | undefined | null): number | null {
  if (text == null) return null;
  let s = text.trim();
  if (!s) return null;
  let sign = 1;
  if (s[0] === "-" || s[0] === "+") {
    if (s[0] === "-") sign = -1;
    s = s.slice(1);
  }
  if (s === "0") return 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/y;
  let total = 0;
  let pos = 0;
  while (pos < s.length) {
    re.lastIndex = pos;
    const m = re.exec(s);
    if (!m) return null;
    total += parseFloat(m[1]!) * UNIT_MS[m[2]!]!;
    pos = re.lastIndex;
  }
  return sign * total;
}

/** "1h02m", "4m05s", "42s": compact, for countdowns. */
export function formatCountdown(ms: number): string {
  if (ms <= 0) return "0s";
  const total = Math.ceil(ms / 1000);
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h > 0) return `${h}h${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m${String(s).padStart(2, "0")}s`;
  return `${s}s`;
}

/** A Go duration for POST /grants from a number and unit the user picked. */
export function toGoDuration(amount: number, unit: "m" | "h"): string {
  return `${Math.max(0, Math.floor(amount))}${unit}`;
}

/** Why `text` cannot be a grant's duration, or "" when it can (a Go duration above zero). */
export function durationProblem(text: string): string {
  const ms = parseGoDuration(text);
  if (ms === null) return `“${text.trim()}” is not a duration: a number and a unit (s, m, h), such as 30m, 2h or 1h30m.`;
  if (ms <= 0) return "A grant needs a duration above zero.";
  return "";
}
