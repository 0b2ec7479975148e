import { useEffect, useMemo, useRef, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { useAction } from "../api/actions";
import { ApiError, mesh, seg } from "../api/client";
import { useWrites } from "../api/people";
import { POLL, usePolicies, useTools } from "../api/queries";
import type { Policy, PolicyFile, PolicyFileSaved, PolicyRule } from "../api/types";
import { Badge, Section } from "../components/bits";
import { ErrorNote, QueryState } from "../components/states";
import { globMatch } from "../lib/glob";
import { faultLine } from "../lib/policyFault";
import { pretty } from "../lib/format";
import { Link, navigate, useLocation } from "../router";
import { Tabs } from "./Approvals";

const TABS = [
  ["policy", "By policy"],
  ["tool", "By tool"],
  ["yaml", "YAML files"],
] as const;

export function PoliciesPage() {
  const loc = useLocation();
  const tab = loc.query.get("tab") ?? "policy";
  return (
    <>
      <h1>Policies</h1>
      <Tabs tabs={TABS} current={tab} base="/policies" />
      {tab === "tool" ? <ByTool /> : tab === "yaml" ? <YamlEditor initial={loc.query.get("file") ?? ""} /> : <ByPolicy />}
    </>
  );
}

function condText(r: PolicyRule): string {
  return r.condition ? `if ${r.condition.field} ${r.condition.operator} ${pretty(r.condition.value)}` : "";
}

function ByPolicy() {
  const q = usePolicies();
  return (
    <QueryState query={q} what="policies" isEmpty={(d) => d.length === 0} empty="No policy is loaded, so every call is denied (fail closed). Add one under YAML files.">
      {(d) => (
        <>
          <p className="muted small">Most specific first; the first matching rule of the most specific matching policy decides.</p>
          {d.map((p) => (
            <Section
              key={`${p.name}:${p.agent}`}
              title={
                <>
                  {p.name} <span className="muted small">agent <span className="mono">{p.agent}</span></span>
                </>
              }
              actions={
                p.source_file ? (
                  <Link to="/policies" query={{ tab: "yaml", file: fileName(p.source_file) }} className="small">{p.source_file}</Link>
                ) : null
              }
            >
              {p.rate_limit ? <p className="small">Rate limit: {Object.entries(p.rate_limit).map(([k, v]) => `${k} ${v}`).join(", ")}</p> : null}
              <div className="table-wrap">
                <table className="rules">
                  <thead>
                    <tr>
                      <th scope="col">#</th>
                      <th scope="col">Tools</th>
                      <th scope="col">Action</th>
                      <th scope="col">Condition</th>
                    </tr>
                  </thead>
                  <tbody>
                    {p.rules.map((r, i) => (
                      <tr key={i}>
                        <td className="num">{i + 1}</td>
                        <td className="mono">{r.tools.join(", ")}</td>
                        <td><Badge value={r.action} /></td>
                        <td className="mono small">{condText(r)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            </Section>
          ))}
        </>
      )}
    </QueryState>
  );
}

function fileName(path: string): string {
  const base = path.split(/[\\/]/).pop() ?? path;
  return base.replace(/\.ya?ml$/, "");
}

/** The first rule of a policy that names the tool, as the mesh would pick it (conditions shown, not evaluated). */
export function firstRule(p: Policy, tool: string): PolicyRule | null {
  return p.rules.find((r) => r.tools.some((g) => globMatch(g, tool))) ?? null;
}

function ByTool() {
  const policies = usePolicies();
  const tools = useTools();
  const names = useMemo(() => {
    const s = new Set((tools.data ?? []).map((t) => t.name));
    for (const p of policies.data ?? []) for (const r of p.rules) for (const g of r.tools) if (!/[*?[]/.test(g)) s.add(g);
    return [...s].sort();
  }, [tools.data, policies.data]);
  return (
    <QueryState query={policies} what="policies" isEmpty={(d) => d.length === 0} empty="No policy is loaded.">
      {(ps) => (
        <Section title="Which rule each policy applies to each tool">
          {tools.isError ? <ErrorNote error={tools.error} what="the tool catalog" /> : null}
          <p className="muted small">
            Columns are policies (agent glob below the name). A blank cell means that policy has no rule for the tool. Use an
            agent's page to change one tool's action for that agent.
          </p>
          <div className="table-wrap">
            <table className="matrix">
              <thead>
                <tr>
                  <th scope="col">Tool</th>
                  {ps.map((p) => (
                    <th key={`${p.name}:${p.agent}`} scope="col">
                      {p.name}
                      <div className="muted small mono">{p.agent}</div>
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {names.map((t) => (
                  <tr key={t}>
                    <th scope="row" className="mono">{t}</th>
                    {ps.map((p) => {
                      const r = firstRule(p, t);
                      return (
                        <td key={`${p.name}:${p.agent}`}>
                          {r ? (
                            <>
                              <Badge value={r.action} />
                              {r.condition ? <div className="small muted mono">{condText(r)}</div> : null}
                            </>
                          ) : null}
                        </td>
                      );
                    })}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </Section>
      )}
    </QueryState>
  );
}

function normalizeFiles(body: unknown): string[] {
  const list = Array.isArray(body) ? body : body && typeof body === "object" && Array.isArray((body as { files?: unknown }).files) ? (body as { files: unknown[] }).files : [];
  return list
    .map((x) => (typeof x === "string" ? x : x && typeof x === "object" && typeof (x as { name?: unknown }).name === "string" ? (x as { name: string }).name : ""))
    .filter(Boolean)
    .map((n) => n.replace(/\.ya?ml$/, ""))
    .sort();
}

interface SaveFault {
  error: string;
  key?: string;
}

function YamlEditor({ initial }: { initial: string }) {
  const files = useQuery({
    queryKey: ["policy-files"],
    queryFn: ({ signal }) => mesh.get<unknown>("/policy-files", undefined, signal).then(normalizeFiles),
    refetchInterval: POLL.catalog,
  });
  const [name, setName] = useState(initial);
  const [text, setText] = useState("");
  const [loaded, setLoaded] = useState<{ name: string; text: string } | null>(null);
  const [fault, setFault] = useState<SaveFault | null>(null);
  const [newName, setNewName] = useState("");
  const gutter = useRef<HTMLPreElement>(null);
  const editor = useRef<HTMLTextAreaElement>(null);
  const escaped = useRef(false);
  const dirty = loaded !== null && text !== loaded.text;

  const file = useQuery({
    queryKey: ["policy-file", name],
    queryFn: ({ signal }) => mesh.get<PolicyFile>(`/policy-files/${seg(name)}`, undefined, signal),
    enabled: !!name && loaded?.name !== name,
    refetchInterval: false,
    retry: false,
  });
  useEffect(() => {
    if (file.data && loaded?.name !== name) {
      setLoaded({ name, text: file.data.text });
      setText(file.data.text);
      setFault(null);
    }
  }, [file.data, name, loaded]);

  const writes = useWrites();
  const save = useAction(
    (v: { name: string; text: string }) => mesh.put<PolicyFileSaved>(`/policy-files/${seg(v.name)}`, { text: v.text }),
    [["policies"], ["policy-files"], ["tool-decisions"]],
    () => {
      setLoaded({ name, text });
      setFault(null);
    },
  );
  useEffect(() => {
    const e = save.error;
    if (e instanceof ApiError && e.status === 400 && e.body && typeof e.body === "object") setFault(e.body as SaveFault);
  }, [save.error]);

  const open = (n: string) => {
    if (n === name) return;
    if (dirty && !window.confirm(`Discard your changes to ${name}?`)) return;
    setLoaded(null);
    setText("");
    setFault(null);
    save.reset();
    setName(n);
    navigate("/policies", { tab: "yaml", file: n });
  };

  // Back/forward between files: follow the URL unless that would drop unsaved work.
  useEffect(() => {
    if (initial && initial !== name) open(initial);
  }, [initial]);

  const lines = text.split("\n").length;
  // The line the server's fault names (its own "line N", or where its key is): marked in the gutter.
  const faultAt = fault ? faultLine(text, fault) : null;
  const goToLine = (n: number) => {
    const el = editor.current;
    if (!el) return;
    const starts = text.split("\n").slice(0, n - 1).reduce((at, l) => at + l.length + 1, 0);
    const end = starts + (text.split("\n")[n - 1]?.length ?? 0);
    el.focus();
    el.setSelectionRange(starts, end);
    const lineHeight = parseFloat(getComputedStyle(el).lineHeight) || 19.5;
    el.scrollTop = Math.max(0, (n - 1) * lineHeight - el.clientHeight / 2);
    if (gutter.current) gutter.current.scrollTop = el.scrollTop;
  };
  return (
    <div className="editor-layout">
      <Section title="Files">
        <QueryState query={files} what="policy files" isEmpty={(d) => d.length === 0} empty="No policy file in the policy directory yet.">
          {(d) => (
            <ul className="file-list">
              {d.map((n) => (
                <li key={n}>
                  <button type="button" className={`link-button ${n === name ? "current" : ""}`} aria-current={n === name ? "true" : undefined} onClick={() => open(n)}>
                    {n}.yaml
                  </button>
                </li>
              ))}
            </ul>
          )}
        </QueryState>
        <form
          className="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            const n = newName.trim().replace(/\.ya?ml$/, "");
            if (!/^[A-Za-z0-9_.-]+$/.test(n)) return;
            setNewName("");
            if (dirty && !window.confirm(`Discard your changes to ${name}?`)) return;
            setName(n);
            setLoaded({ name: n, text: "" });
            setText(`name: ${n}\nagent: "*"\nrules:\n  - tools: ["*"]\n    action: deny\n`);
            setFault(null);
          }}
        >
          <label htmlFor="new-file" className="sr-only">New file name</label>
          <input id="new-file" placeholder="new-file" pattern="[A-Za-z0-9_.\-]+" value={newName} onChange={(e) => setNewName(e.target.value)} />
          <button type="submit" className="btn btn-small">New</button>
        </form>
      </Section>
      <Section
        title={name ? <>{name}.yaml {dirty ? <span className="badge badge-warn">unsaved</span> : null}</> : "Editor"}
        actions={
          name ? (
            <>
              <button type="button" className="btn btn-ghost" disabled={!dirty} onClick={() => loaded && setText(loaded.text)}>Revert</button>
              <button type="button" className="btn" disabled={save.isPending || !dirty || !writes} onClick={() => save.mutate({ name, text })}>
                {save.isPending ? "Saving…" : "Save and reload"}
              </button>
            </>
          ) : null
        }
      >
        {!name ? (
          <p className="muted">Pick a file to edit. Saving validates the YAML on the server; a policy that does not validate is not written.</p>
        ) : file.isError ? (
          <ErrorNote error={file.error} what={`${name}.yaml`} />
        ) : loaded === null ? (
          <p className="muted" role="status">Loading {name}.yaml…</p>
        ) : (
          <>
            {fault ? (
              <div className="note note-error" role="alert">
                <strong>Not saved: the server rejected this policy.</strong> {fault.error}
                {fault.key && !fault.error.startsWith(fault.key) ? <> (at <code>{fault.key}</code>)</> : null}
                {faultAt ? (
                  <>
                    {" "}
                    <button type="button" className="link-button" data-fault-line={faultAt} onClick={() => goToLine(faultAt)}>
                      Line {faultAt}
                    </button>
                  </>
                ) : null}
              </div>
            ) : save.error && !(save.error instanceof ApiError && save.error.status === 400) ? (
              <ErrorNote error={save.error} />
            ) : save.data ? (
              <p className="note note-ok" role="status">Saved {save.data.name}.yaml{save.data.reloaded ? "; the mesh reloaded its policies" : ""}.</p>
            ) : null}
            <div className="editor">
              <pre className="gutter" ref={gutter} aria-hidden="true">
                {Array.from({ length: lines }, (_, i) => (
                  <span key={i} className={i + 1 === faultAt ? "gutter-line gutter-fault" : "gutter-line"} title={i + 1 === faultAt ? fault?.error : undefined}>
                    {i + 1}
                  </span>
                ))}
              </pre>
              <label htmlFor="yaml" className="sr-only">YAML of {name}</label>
              <textarea
                id="yaml"
                ref={editor}
                className="code-input"
                spellCheck={false}
                value={text}
                aria-invalid={fault ? true : undefined}
                onScroll={(e) => {
                  if (gutter.current) gutter.current.scrollTop = e.currentTarget.scrollTop;
                }}
                onChange={(e) => {
                  setText(e.target.value);
                  setFault(null);
                }}
                onKeyDown={(e) => {
                  // Tab inserts two spaces (YAML forbids tabs); Escape leaves the editor for keyboard users.
                  if (e.key === "Escape") {
                    escaped.current = true;
                    return;
                  }
                  const leaving = escaped.current;
                  escaped.current = false;
                  if (e.key === "Tab" && !e.shiftKey && !leaving) {
                    e.preventDefault();
                    const el = e.currentTarget;
                    const { selectionStart: a, selectionEnd: b } = el;
                    const next = text.slice(0, a) + "  " + text.slice(b);
                    setText(next);
                    requestAnimationFrame(() => el.setSelectionRange(a + 2, a + 2));
                  } else if ((e.ctrlKey || e.metaKey) && e.key === "s") {
                    e.preventDefault();
                    if (dirty) save.mutate({ name, text });
                  }
                }}
              />
            </div>
            <p className="muted small">Tab indents by two spaces; Ctrl+S saves; Escape then Tab leaves the editor.</p>
          </>
        )}
      </Section>
    </div>
  );
}
