// Diff and Replay side by side. The diff compares two kept versions of a policy file, a catalog file or an
// upstream tool definition (breaking changes first, then the text in two columns); the replay re-decides the
// traced calls of the last days with a proposed policy set (a draft or an edited file) and groups every
// decision that would change by agent and tool, before anything is applied.
import { useEffect, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { CONSOLE_BY, useAction } from "../api/actions";
import { useWrites } from "../api/people";
import { mesh, seg } from "../api/client";
import { useDiff, useDrafts, useVersionHistory, useVersionNames, type Change, type Replay, type VersionKind } from "../api/governance";
import type { PolicyFile } from "../api/types";
import { Section, TraceLink } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { groupByAgent, narrows, orderChanges, sideBySide } from "../lib/governance";
import { Link, navigate, pathSeg, useLocation } from "../router";

const CLASS_TONE: Record<string, string> = { breaking: "bad", expanding: "warn", neutral: "muted" };

export function DiffReplayPage() {
  const loc = useLocation();
  const q = Object.fromEntries(loc.query.entries());
  const go = (over: Record<string, string>) => navigate("/diff", { ...q, ...over });
  return (
    <>
      <h1>Diff and replay</h1>
      <p className="muted small">
        Left: what changed between two versions, breaking first. Right: what a proposed policy would have decided for the real calls of the last days.
      </p>
      <div className="side-by-side">
        <DiffPane kind={(q.kind as VersionKind) || "policy"} name={q.name ?? ""} old={q.old ?? ""} now={q.new ?? ""} go={go} />
        <ReplayPane draft={q.draft ?? ""} go={go} />
      </div>
    </>
  );
}

function ChangeItem({ c }: { c: Change }) {
  return (
    <li data-class={c.class}>
      <span className={`badge badge-${CLASS_TONE[c.class] ?? "muted"}`}>{c.class}</span> <span className="mono small">{c.kind}</span>{" "}
      <strong className="mono">{c.subject}</strong>
      <div className="small">{c.detail}</div>
      {c.affected_agents.length ? (
        <div className="small muted">
          affects{" "}
          {c.affected_agents.map((a, i) => (
            <span key={a}>
              {i ? ", " : ""}
              <Link to={`/catalog/${pathSeg(a)}`}>{a}</Link>
            </span>
          ))}
        </div>
      ) : null}
    </li>
  );
}

function TextDiff({ text, from, to }: { text: string; from: number; to: number }) {
  const rows = sideBySide(text);
  if (!rows.length) return <p className="muted small">The two versions have the same text.</p>;
  return (
    <div className="table-wrap">
      <table className="diff2" aria-label="Text diff, before and after">
        <colgroup>
          <col className="ln-col" />
          <col />
          <col className="ln-col" />
          <col />
        </colgroup>
        <thead>
          <tr>
            <th scope="col" colSpan={2}>version {from} (before)</th>
            <th scope="col" colSpan={2}>version {to} (after)</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r, i) =>
            r.kind === "hunk" ? (
              <tr key={i} className="d-hunk">
                <td colSpan={4}>{r.left}</td>
              </tr>
            ) : (
              <tr key={i} className={`d-${r.kind}`}>
                <td className="ln">{r.leftNo ?? ""}</td>
                <td className="l">{r.left ?? ""}</td>
                <td className="ln">{r.rightNo ?? ""}</td>
                <td className="r">{r.right ?? ""}</td>
              </tr>
            ),
          )}
        </tbody>
      </table>
    </div>
  );
}

function DiffPane({ kind, name, old, now, go }: { kind: VersionKind; name: string; old: string; now: string; go: (o: Record<string, string>) => void }) {
  const names = useVersionNames(kind);
  const history = useVersionHistory(kind, name);
  const versions = (history.data ?? []).map((v) => v.version).sort((a, b) => a - b);
  const to = now ? Number(now) : (versions.at(-1) ?? null);
  const from = old ? Number(old) : versions.length >= 2 ? versions[versions.length - 2]! : null;
  const diff = useDiff(kind, name, from, to);
  return (
    <Section title="Diff" id="diff">
      <form className="filters" aria-label="Choose the versions" onSubmit={(e) => e.preventDefault()}>
        <div className="field">
          <label htmlFor="d-kind">What</label>
          <select id="d-kind" value={kind} onChange={(e) => go({ kind: e.target.value, name: "", old: "", new: "" })}>
            <option value="policy">policy file</option>
            <option value="catalog">catalog file</option>
            <option value="tool">tool definition</option>
          </select>
        </div>
        <div className="field">
          <label htmlFor="d-name">Name</label>
          <select id="d-name" value={name} onChange={(e) => go({ name: e.target.value, old: "", new: "" })}>
            <option value="">choose…</option>
            {(names.data ?? []).map((n) => (
              <option key={n.name} value={n.name}>
                {n.name} ({n.versions})
              </option>
            ))}
          </select>
        </div>
        {versions.length >= 2 ? (
          <>
            <div className="field">
              <label htmlFor="d-old">From version</label>
              <select id="d-old" value={from ?? ""} onChange={(e) => go({ old: e.target.value })}>
                {versions.map((v) => (
                  <option key={v} value={v}>{v}</option>
                ))}
              </select>
            </div>
            <div className="field">
              <label htmlFor="d-new">To version</label>
              <select id="d-new" value={to ?? ""} onChange={(e) => go({ new: e.target.value })}>
                {versions.map((v) => (
                  <option key={v} value={v}>{v}</option>
                ))}
              </select>
            </div>
          </>
        ) : null}
      </form>
      {names.isError ? <ErrorNote error={names.error} what="the versions" /> : null}
      {!name ? (
        <p className="muted">Pick a {kind === "tool" ? "tool" : "file"}: every version the server loaded or saw is kept.</p>
      ) : history.isPending ? null : versions.length < 2 ? (
        <p className="note note-empty">{name} has one version so far: nothing to compare.</p>
      ) : (
        <QueryState query={diff} what="the diff">
          {(d) => {
            const changes = orderChanges(d.changes);
            return (
              <>
                <p className="row" aria-label="Summary">
                  {(["breaking", "expanding", "neutral"] as const).map((c) => (
                    <span key={c} className={`badge badge-${CLASS_TONE[c]}`} data-summary={c}>
                      {d.summary[c] ?? 0} {c}
                    </span>
                  ))}
                </p>
                {changes.length ? (
                  <ul className="change-list">
                    {changes.map((c, i) => (
                      <ChangeItem key={i} c={c} />
                    ))}
                  </ul>
                ) : (
                  <p className="muted small">No classified change (the text may still differ).</p>
                )}
                <h3 className="h-small">Text</h3>
                <TextDiff text={d.text_diff} from={d.from} to={d.to} />
              </>
            );
          }}
        </QueryState>
      )}
    </Section>
  );
}

interface FileEntry {
  name: string;
}

function ReplayPane({ draft, go }: { draft: string; go: (o: Record<string, string>) => void }) {
  const drafts = useDrafts();
  const files = useQuery({
    queryKey: ["policy-files"],
    queryFn: ({ signal }) => mesh.get<FileEntry[] | null>("/policy-files", undefined, signal).then((l) => (l ?? []).map((f) => f.name).sort()),
    refetchInterval: false,
  });
  const [source, setSource] = useState<"draft" | "edit">(draft ? "draft" : "edit");
  const [file, setFile] = useState("");
  const [text, setText] = useState("");
  const [days, setDays] = useState("7");
  const [draftName, setDraftName] = useState("");
  const [result, setResult] = useState<Replay | null>(null);

  useEffect(() => {
    if (!file && files.data?.length) setFile(files.data[0]!);
  }, [files.data, file]);
  const current = useQuery({
    queryKey: ["policy-file", file],
    queryFn: ({ signal }) => mesh.get<PolicyFile>(`/policy-files/${seg(file)}`, undefined, signal),
    enabled: !!file,
    refetchInterval: false,
  });
  useEffect(() => {
    if (current.data) setText(current.data.text);
  }, [current.data]);

  const writes = useWrites();
  const run = useAction(
    (body: Record<string, unknown>) => mesh.post<Replay>("/governance/replay", body),
    [],
    (r) => setResult(r),
  );
  const saveDraft = useAction(
    (v: { name: string }) => mesh.put<{ name: string }>(`/governance/drafts/${seg(v.name)}`, { files: { [`${file}.yaml`]: text }, by: CONSOLE_BY }),
    [["governance", "drafts"]],
    (r) => {
      setSource("draft");
      go({ draft: r.name });
    },
  );
  const apply = useAction(
    (name: string) => mesh.post<{ name: string; applied: { name: string }[] }>(`/governance/drafts/${seg(name)}/apply`, { by: CONSOLE_BY }),
    [["governance"], ["policies"], ["policy-files"], ["policy-file"]],
    // The diff pane turns to what the draft changed: the first file it wrote, its two newest versions.
    (r) => {
      const first = r.applied[0]?.name;
      if (first) go({ kind: "policy", name: `${first.replace(/\.yaml$/, "")}.yaml`, old: "", new: "" });
    },
  );
  const nDays = Number(days);
  const daysOk = Number.isFinite(nDays) && nDays > 0 && nDays <= 365;
  const pending = (drafts.data ?? []).filter((d) => !d.applied_at);
  return (
    <Section title="Replay" id="replay">
      <form
        aria-label="Replay a proposed policy"
        onSubmit={(e) => {
          e.preventDefault();
          if (!daysOk) return;
          setResult(null);
          run.mutate(source === "draft" ? { draft, days: nDays } : { files: { [`${file}.yaml`]: text }, days: nDays });
        }}
      >
        <fieldset className="row">
          <legend className="small muted">Proposed policy</legend>
          <label className="check">
            <input type="radio" name="source" checked={source === "edit"} onChange={() => setSource("edit")} /> an edited file
          </label>
          <label className="check">
            <input type="radio" name="source" checked={source === "draft"} onChange={() => setSource("draft")} /> a saved draft
          </label>
        </fieldset>
        {source === "draft" ? (
          <div className="field">
            <label htmlFor="r-draft">Draft</label>
            <select id="r-draft" value={draft} onChange={(e) => go({ draft: e.target.value })}>
              <option value="">choose…</option>
              {(drafts.data ?? []).map((d) => (
                <option key={d.name} value={d.name}>
                  {d.name} ({Object.keys(d.files).join(", ")}){d.applied_at ? " — applied" : ""}
                </option>
              ))}
            </select>
          </div>
        ) : (
          <>
            <div className="field">
              <label htmlFor="r-file">Policy file</label>
              <select id="r-file" value={file} onChange={(e) => setFile(e.target.value)}>
                {(files.data ?? []).map((f) => (
                  <option key={f} value={f}>{f}.yaml</option>
                ))}
              </select>
            </div>
            <div className="field">
              <label htmlFor="r-text">Proposed {file}.yaml</label>
              <textarea id="r-text" className="code-input replay-text" rows={12} spellCheck={false} value={text} onChange={(e) => setText(e.target.value)} />
            </div>
          </>
        )}
        <div className="form-row">
          <div className="field">
            <label htmlFor="r-days">Days of traffic</label>
            <input id="r-days" type="number" min={0.01} max={365} step="any" value={days} aria-invalid={!daysOk || undefined} onChange={(e) => setDays(e.target.value)} />
          </div>
          <div className="row">
            <button type="submit" className="btn" disabled={run.isPending || !daysOk || (source === "draft" ? !draft : !file) || !writes}>
              {run.isPending ? "Replaying…" : "Replay"}
            </button>
          </div>
        </div>
        {!daysOk ? <p className="text-bad small" role="alert">Days is a number above 0, at most 365.</p> : null}
      </form>
      {source === "edit" ? (
        <form
          className="inline-form"
          aria-label="Save as a draft"
          onSubmit={(e) => {
            e.preventDefault();
            if (/^[A-Za-z0-9_.-]+$/.test(draftName)) saveDraft.mutate({ name: draftName });
          }}
        >
          <label htmlFor="r-draft-name" className="sr-only">Draft name</label>
          <input id="r-draft-name" placeholder="draft name" pattern="[A-Za-z0-9_.\-]+" value={draftName} onChange={(e) => setDraftName(e.target.value)} />
          <button type="submit" className="btn btn-small" disabled={!draftName || saveDraft.isPending || !writes}>Save as draft</button>
        </form>
      ) : draft && pending.some((d) => d.name === draft) ? (
        <p>
          <button
            type="button"
            className="btn btn-small"
            disabled={apply.isPending || !writes}
            onClick={() => window.confirm(`Apply the draft ${draft}? Its files replace the policy files in force.`) && apply.mutate(draft)}
          >
            Apply draft {draft}
          </button>
        </p>
      ) : null}
      {saveDraft.error ? <ErrorNote error={saveDraft.error} /> : null}
      {apply.error ? <ErrorNote error={apply.error} /> : null}
      {apply.data ? (
        <p className="note note-ok" role="status">
          Applied {apply.data.name}: {apply.data.applied.map((a) => `${a.name}.yaml`).join(", ")} written and reloaded. Its diff is on the left.
        </p>
      ) : null}
      {run.error ? <ErrorNote error={run.error} what="the replay" /> : null}
      {result ? <ReplayResult r={result} /> : null}
    </Section>
  );
}

function ReplayResult({ r }: { r: Replay }) {
  const agents = groupByAgent(r.groups);
  return (
    <div className="replay-result" data-changed={r.changed}>
      <p role="status">
        Replayed <strong>{r.calls}</strong> calls of the last {r.days} days in {r.elapsed_ms} ms: <strong>{r.changed}</strong> would change.
      </p>
      {Object.keys(r.transitions).length ? (
        <p className="row">
          {Object.entries(r.transitions)
            .sort(([a], [b]) => Number(narrows(...(b.split("->") as [string, string]))) - Number(narrows(...(a.split("->") as [string, string]))))
            .map(([t, n]) => {
              const [from, to] = t.split("->") as [string, string];
              return (
                <span key={t} className={`badge badge-${narrows(from, to) ? "bad" : "warn"}`}>
                  {from} → {to}: {n}
                </span>
              );
            })}
        </p>
      ) : null}
      {agents.map((a) => (
        <div key={a.agent} className="replay-agent" data-agent={a.agent}>
          <h3 className="h-small">
            <Link to={`/catalog/${pathSeg(a.agent)}`} className="mono">{a.agent}</Link> <span className="muted small">({a.count} calls)</span>
          </h3>
          <table className="small">
            <thead>
              <tr>
                <th scope="col">Tool</th>
                <th scope="col">Change</th>
                <th scope="col" className="num">Calls</th>
                <th scope="col">E.g.</th>
              </tr>
            </thead>
            <tbody>
              {a.groups.map((g) => (
                <tr key={`${g.tool}:${g.from}:${g.to}`} data-tool={g.tool}>
                  <td className="mono">{g.tool}</td>
                  <td>
                    <span className={narrows(g.from, g.to) ? "text-bad" : "text-warn"}>
                      {g.from} → {g.to}
                    </span>{" "}
                    <span className="muted">({g.rule_before} → {g.rule_after})</span>
                  </td>
                  <td className="num">{g.count}</td>
                  <td>
                    {g.trace_ids.slice(0, 3).map((t) => (
                      <span key={t}>
                        <TraceLink id={t} />{" "}
                      </span>
                    ))}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ))}
    </div>
  );
}
