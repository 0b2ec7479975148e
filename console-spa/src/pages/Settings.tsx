import { useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { ApiError, request, type Realm } from "../api/client";
import { Section } from "../components/bits";
import { type ConnectionSettings, meshBase, saveSettings, useSettings } from "../settings";

interface Probe {
  label: string;
  realm: Realm;
  path: string;
}

const PROBES: Probe[] = [
  { label: "Mesh reachable (GET /health)", realm: "mesh", path: "/health" },
  { label: "Admin token accepted (GET /grants)", realm: "mesh", path: "/grants" },
  { label: "Memory reachable (GET /memory/chain)", realm: "memory", path: "/memory/chain" },
  { label: "Supervisor (GET /status)", realm: "supervisor", path: "/status" },
];

type Result = { ok: boolean; text: string };

function describe(e: unknown): string {
  if (e instanceof ApiError) {
    if (e.status === 401) return "refused the token (401)";
    if (e.status === 0) return e.message;
    return `${e.message} (HTTP ${e.status})`;
  }
  return (e as Error).message;
}

export function SettingsPage() {
  const current = useSettings();
  const qc = useQueryClient();
  const [form, setForm] = useState<ConnectionSettings>(current);
  const [show, setShow] = useState(false);
  const [saved, setSaved] = useState(false);
  const [results, setResults] = useState<Record<string, Result>>({});
  const [testing, setTesting] = useState(false);

  const save = () => {
    saveSettings({ ...form, baseUrl: form.baseUrl.trim(), supervisorUrl: form.supervisorUrl.trim() });
    // Data from the old server or token must not linger on screen.
    qc.clear();
    setSaved(true);
  };

  const test = async () => {
    save();
    setTesting(true);
    setResults({});
    const out: Record<string, Result> = {};
    for (const p of PROBES) {
      if (p.realm === "supervisor" && !form.supervisorUrl.trim()) {
        out[p.label] = { ok: true, text: "not configured (optional)" };
        continue;
      }
      try {
        await request(p.realm, p.path);
        out[p.label] = { ok: true, text: "ok" };
      } catch (e) {
        out[p.label] = { ok: false, text: describe(e) };
      }
      setResults({ ...out });
    }
    setResults({ ...out });
    setTesting(false);
  };

  const field = (key: keyof ConnectionSettings, label: string, help: string, secret = false, placeholder = "") => (
    <div className="field">
      <label htmlFor={`s-${key}`}>{label}</label>
      <input
        id={`s-${key}`}
        type={secret && !show ? "password" : "text"}
        autoComplete="off"
        spellCheck={false}
        placeholder={placeholder}
        value={form[key]}
        onChange={(e) => {
          setForm({ ...form, [key]: e.target.value });
          setSaved(false);
        }}
      />
      <span className="help">{help}</span>
    </div>
  );

  return (
    <>
      <h1>Settings</h1>
      <Section title="Connection">
        <form
          className="form"
          onSubmit={(e) => {
            e.preventDefault();
            save();
          }}
        >
          {field("baseUrl", "Mesh base URL", `Empty means this page's own origin (${globalThis.location?.origin ?? ""}).`, false, globalThis.location?.origin ?? "")}
          {field("adminToken", "Admin token", "Sent as Authorization: Bearer … on every request. The console link flux7 serve prints fills it in; the token is also in flux7-admin.token beside the database.", true)}
          {field("memoryToken", "Memory token (optional)", "For /rpc and /memory/* when memory has its own token; empty means the admin token.", true)}
          {field("supervisorUrl", "Supervisor admin URL (optional)", "The sup7 admin API, e.g. http://localhost:9096.", false, "http://localhost:9096")}
          {field("supervisorToken", "Supervisor admin token", "The supervisor's admin.token.", true)}
          <label className="check">
            <input type="checkbox" checked={show} onChange={(e) => setShow(e.target.checked)} /> Show tokens
          </label>
          <div className="row">
            <button type="submit" className="btn">Save</button>
            <button type="button" className="btn btn-ghost" disabled={testing} onClick={() => void test()}>
              {testing ? "Testing…" : "Save and test"}
            </button>
          </div>
          {saved ? <p className="note note-ok" role="status">Saved for this browser tab; using {meshBase()}.</p> : null}
        </form>
        {Object.keys(results).length ? (
          <ul className="probe-list" aria-live="polite">
            {PROBES.filter((p) => results[p.label]).map((p) => (
              <li key={p.label} className={results[p.label]!.ok ? "text-ok" : "text-bad"}>
                <span aria-hidden="true">{results[p.label]!.ok ? "✓" : "✗"}</span> {p.label}: {results[p.label]!.text}
              </li>
            ))}
          </ul>
        ) : null}
        <p className="muted small">
          Settings are kept in this tab's sessionStorage only: they are gone when the tab closes and are never part of the
          built files.
        </p>
      </Section>
    </>
  );
}
