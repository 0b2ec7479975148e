// A pending call's arguments and, when its caller sent one, the diff it would make: shown open when small,
// behind one click otherwise. `onSeen` fires once they are on screen, which is what lets Approve be pressed.
import { useEffect, useId, useState } from "react";
import { argumentsFitInline, diffLines } from "../lib/people";
import type { ApprovalView } from "../api/types";
import { Params } from "./bits";

export function DiffView({ path, diff }: { path?: string; diff: string }) {
  const lines = diffLines(diff);
  const added = lines.filter((l) => l.kind === "add").length;
  const removed = lines.filter((l) => l.kind === "del").length;
  return (
    <figure className="diff">
      <figcaption>
        <span className="mono">{path || "(no path)"}</span>{" "}
        <span className="diff-count">
          <span className="diff-add-count">+{added}</span> <span className="diff-del-count">−{removed}</span>
        </span>
      </figcaption>
      <pre className="diff-body" tabIndex={0} aria-label={`Diff of ${path || "the file"}: ${added} lines added, ${removed} removed`}>
        {lines.map((l, i) => (
          <span key={i} className={`diff-line diff-${l.kind}`} data-kind={l.kind}>
            {l.kind === "add" ? <span className="sr-only">added: </span> : l.kind === "del" ? <span className="sr-only">removed: </span> : null}
            {l.text}
            {"\n"}
          </span>
        ))}
      </pre>
    </figure>
  );
}

function Preview({ preview }: { preview: NonNullable<ApprovalView["preview"]> }) {
  if (preview.kind === "redacted") return <p className="muted small">The diff is hidden on this server (supervisor.expose_content is off).</p>;
  if (preview.kind === "diff" && typeof preview.diff === "string") return <DiffView path={preview.path} diff={preview.diff} />;
  return <p className="muted small">A preview of kind {preview.kind}.</p>;
}

export function CallArguments({ a, onSeen }: { a: Pick<ApprovalView, "id" | "params" | "preview">; onSeen?: () => void }) {
  const small = argumentsFitInline(a.params, !!a.preview);
  const [open, setOpen] = useState(small);
  const id = useId();
  useEffect(() => {
    if (open) onSeen?.();
  }, [open, onSeen]);
  const count = a.params && typeof a.params === "object" && !Array.isArray(a.params) ? Object.keys(a.params).length : 0;
  return (
    <details className="call-args" open={open} onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}>
      <summary id={id}>
        Arguments{count ? ` (${count})` : ""}
        {a.preview ? " and the diff" : ""}
      </summary>
      <div className="call-args-body" aria-labelledby={id}>
        <Params value={a.params} />
        {a.preview ? <Preview preview={a.preview} /> : null}
      </div>
    </details>
  );
}
