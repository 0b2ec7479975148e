// Flattening OTLP JSON (GET /otel-traces) into rows for a waterfall, grouped by trace id.
import type { OtlpAttribute, OtlpExport, OtlpSpan } from "../api/types";

export interface SpanRow {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  startMs: number;
  endMs: number;
  depth: number;
  statusCode: number;
  statusMessage: string;
  attrs: Record<string, string>;
}

export interface TraceGroup {
  traceId: string;
  startMs: number;
  endMs: number;
  spans: SpanRow[];
}

/** Nanosecond strings exceed double precision; milliseconds keep what a waterfall needs. */
export function nanosToMs(ns: string | number | undefined): number {
  if (ns === undefined) return 0;
  const s = String(ns);
  if (s.length <= 6) return Number(s) / 1e6;
  return Number(s.slice(0, -6)) + Number(s.slice(-6)) / 1e6;
}

function attrValue(v: OtlpAttribute["value"]): string {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return String(v.intValue);
  if (v.doubleValue !== undefined) return String(v.doubleValue);
  if (v.boolValue !== undefined) return String(v.boolValue);
  return "";
}

export function flattenSpans(data: OtlpExport | null | undefined): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  for (const rs of data?.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) out.push(...(ss.spans ?? []));
  return out;
}

/** Groups spans by trace, orders each trace parent-before-child, and computes nesting depth. */
export function groupTraces(data: OtlpExport | null | undefined): TraceGroup[] {
  const byTrace = new Map<string, SpanRow[]>();
  for (const s of flattenSpans(data)) {
    const attrs: Record<string, string> = {};
    for (const a of s.attributes ?? []) attrs[a.key] = attrValue(a.value);
    const row: SpanRow = {
      traceId: s.traceId,
      spanId: s.spanId,
      parentSpanId: s.parentSpanId ?? "",
      name: s.name,
      startMs: nanosToMs(s.startTimeUnixNano),
      endMs: nanosToMs(s.endTimeUnixNano),
      depth: 0,
      statusCode: s.status?.code ?? 0,
      statusMessage: s.status?.message ?? "",
      attrs,
    };
    const list = byTrace.get(s.traceId) ?? [];
    list.push(row);
    byTrace.set(s.traceId, list);
  }
  const groups: TraceGroup[] = [];
  for (const [traceId, rows] of byTrace) {
    const ids = new Set(rows.map((r) => r.spanId));
    const children = new Map<string, SpanRow[]>();
    const roots: SpanRow[] = [];
    for (const r of rows) {
      if (r.parentSpanId && ids.has(r.parentSpanId) && r.parentSpanId !== r.spanId) {
        const c = children.get(r.parentSpanId) ?? [];
        c.push(r);
        children.set(r.parentSpanId, c);
      } else roots.push(r);
    }
    const ordered: SpanRow[] = [];
    const seen = new Set<string>();
    const visit = (r: SpanRow, depth: number) => {
      if (seen.has(r.spanId)) return;
      seen.add(r.spanId);
      r.depth = depth;
      ordered.push(r);
      for (const c of (children.get(r.spanId) ?? []).sort((a, b) => a.startMs - b.startMs)) visit(c, depth + 1);
    };
    for (const r of roots.sort((a, b) => a.startMs - b.startMs)) visit(r, 0);
    for (const r of rows) if (!seen.has(r.spanId)) visit(r, 0);
    groups.push({
      traceId,
      startMs: Math.min(...ordered.map((r) => r.startMs)),
      endMs: Math.max(...ordered.map((r) => Math.max(r.endMs, r.startMs))),
      spans: ordered,
    });
  }
  return groups.sort((a, b) => b.startMs - a.startMs);
}
