// The three scores over time as one small inline SVG (no chart library: three polylines on a 0–100 scale).
import type { ScorePoint } from "../api/governance";
import { formatTime } from "../lib/format";

const AXES = [
  ["capability", "Capability", "var(--warn)"],
  ["behaviour", "Behaviour", "var(--ok)"],
  ["hygiene", "Hygiene", "var(--accent)"],
] as const;

const W = 480;
const H = 140;
const PAD = { l: 28, r: 8, t: 8, b: 18 };

/** x by time (points at the same instant spread evenly), y from 100 (top) to 0. */
export function chartPoints(history: ScorePoint[], axis: "capability" | "behaviour" | "hygiene"): [number, number][] {
  const ts = history.map((p, i) => {
    const t = new Date(p.at).getTime();
    return Number.isNaN(t) ? i : t;
  });
  const lo = Math.min(...ts);
  const hi = Math.max(...ts);
  const x = (i: number) =>
    history.length === 1 ? PAD.l + (W - PAD.l - PAD.r) / 2 : PAD.l + ((hi > lo ? (ts[i]! - lo) / (hi - lo) : i / (history.length - 1)) * (W - PAD.l - PAD.r));
  const y = (v: number) => PAD.t + (1 - Math.max(0, Math.min(100, v)) / 100) * (H - PAD.t - PAD.b);
  return history.map((p, i) => [Math.round(x(i) * 10) / 10, Math.round(y(p[axis]) * 10) / 10]);
}

export function ScoreChart({ history }: { history: ScorePoint[] }) {
  if (!history.length) return <p className="muted">No score has been kept yet: the first evaluation writes one.</p>;
  const last = history[history.length - 1]!;
  const first = history[0]!;
  return (
    <figure className="score-chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`Scores over time, ${history.length} points: ${AXES.map(([k, l]) => `${l} ${first[k]} to ${last[k]}`).join(", ")}`}>
        {[0, 50, 100].map((v) => {
          const y = PAD.t + (1 - v / 100) * (H - PAD.t - PAD.b);
          return (
            <g key={v}>
              <line x1={PAD.l} x2={W - PAD.r} y1={y} y2={y} className="grid-line" />
              <text x={PAD.l - 4} y={y + 4} textAnchor="end" className="axis-label">{v}</text>
            </g>
          );
        })}
        {AXES.map(([k, label, color]) => {
          const pts = chartPoints(history, k);
          return (
            <g key={k} data-axis={k}>
              {pts.length > 1 ? <polyline points={pts.map((p) => p.join(",")).join(" ")} fill="none" stroke={color} strokeWidth={2} /> : null}
              {pts.map(([x, y], i) => (
                <circle key={i} cx={x} cy={y} r={2.5} fill={color}>
                  <title>{`${label} ${history[i]![k]} at ${formatTime(history[i]!.at)}`}</title>
                </circle>
              ))}
            </g>
          );
        })}
        <text x={PAD.l} y={H - 4} className="axis-label">{formatTime(first.at)}</text>
        {history.length > 1 ? <text x={W - PAD.r} y={H - 4} textAnchor="end" className="axis-label">{formatTime(last.at)}</text> : null}
      </svg>
      <figcaption className="legend small">
        {AXES.map(([k, label, color]) => (
          <span key={k}>
            <span className="swatch" style={{ background: color }} aria-hidden="true" /> {label} <strong>{last[k]}</strong>
          </span>
        ))}
      </figcaption>
    </figure>
  );
}
