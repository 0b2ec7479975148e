import { describe, expect, it } from "vitest";
import type { OtlpExport } from "../api/types";
import { groupTraces, nanosToMs } from "./otel";

const span = (traceId: string, spanId: string, startMs: number, endMs: number, parent?: string) => ({
  traceId,
  spanId,
  ...(parent ? { parentSpanId: parent } : {}),
  name: `tool-${spanId}`,
  kind: 3,
  startTimeUnixNano: `${startMs}000000`,
  endTimeUnixNano: `${endMs}000000`,
  attributes: [{ key: "http.status_code", value: { intValue: "200" } }],
  status: { code: 1 },
});

describe("OTLP waterfall", () => {
  it("keeps millisecond precision from nanosecond strings beyond 2^53", () => {
    expect(nanosToMs("1790000000123456789")).toBeCloseTo(1790000000123.456789, 3);
  });

  it("groups by trace, orders parents before children and nests depth", () => {
    const data: OtlpExport = {
      resourceSpans: [
        {
          scopeSpans: [
            { spans: [span("t1", "c", 1_000_050, 1_000_080, "p"), span("t1", "p", 1_000_000, 1_000_300), span("t2", "x", 2_000_000, 2_000_010)] },
          ],
        },
      ],
    };
    const groups = groupTraces(data);
    expect(groups.map((g) => g.traceId)).toEqual(["t2", "t1"]);
    const t1 = groups[1]!;
    expect(t1.spans.map((s) => [s.spanId, s.depth])).toEqual([
      ["p", 0],
      ["c", 1],
    ]);
    expect(t1.endMs - t1.startMs).toBe(300);
    expect(t1.spans[0]!.attrs["http.status_code"]).toBe("200");
  });

  it("treats a span whose parent is missing as a root", () => {
    const groups = groupTraces({ resourceSpans: [{ scopeSpans: [{ spans: [span("t", "a", 10, 20, "gone")] }] }] });
    expect(groups[0]!.spans[0]!.depth).toBe(0);
  });

  it("accepts an empty export", () => {
    expect(groupTraces({ resourceSpans: null })).toEqual([]);
  });
});
