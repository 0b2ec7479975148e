import { lazy, Suspense, useEffect, useRef, useState, type ReactNode } from "react";
import { ApiError } from "./api/client";
import { useApprovals, useHealth } from "./api/queries";
import { HaltBanner } from "./components/HaltBanner";
import { WhoAmI } from "./components/WhoAmI";
import { AgentDetailPage, AgentsPage } from "./pages/Agents";
import { ApprovalDetailPage, ApprovalsPage } from "./pages/Approvals";
import { CatalogPage, GovAgentPage } from "./pages/Catalog";
import { ConnectionsPage } from "./pages/Connections";
import { DecisionsPage } from "./pages/Decisions";
import { GrantsPage } from "./pages/Grants";
import { GraphPage } from "./pages/Graph";
import { HaltsPage } from "./pages/Halts";
import { LoginPage } from "./pages/Login";
import { MemoryPage } from "./pages/Memory";
import { OAuthConsentPage } from "./pages/OAuthConsent";
import { OverviewPage } from "./pages/Overview";
import { PoliciesPage } from "./pages/Policies";
import { SessionDetailPage, SessionsPage } from "./pages/Sessions";
import { SettingsPage } from "./pages/Settings";
import { SupervisorPage } from "./pages/Supervisor";
import { ToolsPage } from "./pages/Tools";
import { TracesPage } from "./pages/Traces";
import { UsersPage } from "./pages/Users";
import { Link, match, useLocation } from "./router";
import { Loading } from "./components/states";
import { meshBase, useSettings } from "./settings";
import { useTheme } from "./theme";

const NAV: { to: string; label: string }[] = [
  { to: "/", label: "Overview" },
  { to: "/approvals", label: "Approvals" },
  { to: "/decisions", label: "Decisions" },
  { to: "/agents", label: "Agents" },
  { to: "/catalog", label: "Catalog" },
  { to: "/graph", label: "Graph" },
  { to: "/diff", label: "Diff and replay" },
  { to: "/traces", label: "Traces" },
  { to: "/sessions", label: "Sessions" },
  { to: "/otel", label: "OTEL waterfall" },
  { to: "/policies", label: "Policies" },
  { to: "/tools", label: "Tools" },
  { to: "/grants", label: "Grants" },
  { to: "/connections", label: "Connections" },
  { to: "/memory", label: "Memory" },
  { to: "/supervisor", label: "Supervisor" },
  { to: "/halts", label: "Emergency stop" },
  { to: "/users", label: "Users" },
  { to: "/settings", label: "Settings" },
];

type Route = [pattern: string, render: (p: Record<string, string>) => ReactNode, title: string];

const ROUTES: Route[] = [
  ["/", () => <OverviewPage />, "Overview"],
  ["/agents", () => <AgentsPage />, "Agents"],
  ["/agents/:id", (p) => <AgentDetailPage id={p.id!} />, "Agent"],
  ["/catalog", () => <CatalogPage />, "Catalog"],
  ["/catalog/:id", (p) => <GovAgentPage id={p.id!} />, "Agent governance"],
  ["/graph", () => <GraphPage />, "Graph"],
  ["/diff", () => <DiffReplayPage />, "Diff and replay"],
  ["/traces", () => <TracesPage />, "Traces"],
  ["/sessions", () => <SessionsPage />, "Sessions"],
  ["/sessions/:id", (p) => <SessionDetailPage id={p.id!} />, "Session"],
  ["/otel", () => <OtelPage />, "OTEL waterfall"],
  ["/policies", () => <PoliciesPage />, "Policies"],
  ["/approvals", () => <ApprovalsPage />, "Approvals"],
  ["/approvals/:id", (p) => <ApprovalDetailPage id={p.id!} />, "Approval"],
  ["/decisions", () => <DecisionsPage />, "Decisions"],
  ["/supervisor", () => <SupervisorPage />, "Supervisor"],
  ["/grants", () => <GrantsPage />, "Grants"],
  ["/connections", () => <ConnectionsPage />, "Connections"],
  ["/oauth/consent", () => <OAuthConsentPage />, "Connect a client"],
  ["/tools", () => <ToolsPage />, "Tools"],
  ["/memory", () => <MemoryPage />, "Memory"],
  ["/halts", () => <HaltsPage />, "Emergency stop"],
  ["/settings", () => <SettingsPage />, "Settings"],
  ["/login", () => <LoginPage />, "Sign in"],
  ["/users", () => <UsersPage />, "Users"],
];

// Pages few visits open load on demand, keeping the entry chunk (every first visit's download) small.
const DiffReplayPage = lazy(() => import("./pages/DiffReplay").then((m) => ({ default: m.DiffReplayPage })));
const OtelPage = lazy(() => import("./pages/Otel").then((m) => ({ default: m.OtelPage })));

function resolve(path: string): { node: ReactNode; title: string } {
  for (const [pattern, render, title] of ROUTES) {
    const params = match(pattern, path);
    if (params) return { node: <Suspense fallback={<Loading what="the page" />}>{render(params)}</Suspense>, title };
  }
  return {
    node: (
      <div className="note note-empty">
        There is no page at <code>{path}</code>. <Link to="/">Go to the overview</Link>.
      </div>
    ),
    title: "Not found",
  };
}

function isCurrent(to: string, path: string): boolean {
  return to === "/" ? path === "/" : path === to || path.startsWith(to + "/");
}

function PendingCount() {
  const q = useApprovals("pending");
  const n = q.data?.length ?? 0;
  return n ? <span className="count" aria-label={`${n} pending`}>{n}</span> : null;
}

/** Green only when the console can see what it shows: /health answers anyone, so the admin token's own check
 *  is the pending approvals (polled on every page for the count beside Approvals). */
function ConnectionDot() {
  const s = useSettings();
  const health = useHealth();
  const pending = useApprovals("pending");
  const ok = health.data?.status === "ok";
  const refused = pending.error instanceof ApiError && pending.error.status === 401;
  const [tone, label] = health.isPending
    ? ["wait", "connecting"]
    : !ok
      ? ["bad", "unreachable"]
      : refused
        ? ["warn", "not authorised: set the admin token"]
        : ["ok", `connected, ${health.data?.version ?? ""}`];
  return (
    <Link to="/settings" className="conn" title={`${meshBase(s)} — ${label}`} data-conn={tone}>
      <span className={`dot dot-${tone}`} aria-hidden="true" />
      <span className="conn-text">{label}</span>
    </Link>
  );
}

export function App() {
  const loc = useLocation();
  const [theme, nextTheme] = useTheme();
  const [menuOpen, setMenuOpen] = useState(false);
  const { node, title } = resolve(loc.path);
  const mainRef = useRef<HTMLElement>(null);

  const lastPath = useRef(loc.path);
  useEffect(() => {
    document.title = `${title} · flux7 console`;
    setMenuOpen(false);
    // A new page (not a new filter on the same page) moves focus to the content, as a page load would.
    if (lastPath.current !== loc.path) {
      lastPath.current = loc.path;
      mainRef.current?.focus();
      document.documentElement.scrollTop = 0;
    }
  }, [title, loc.path]);

  useEffect(() => {
    if (!menuOpen) return;
    const close = (e: KeyboardEvent) => e.key === "Escape" && setMenuOpen(false);
    window.addEventListener("keydown", close);
    return () => window.removeEventListener("keydown", close);
  }, [menuOpen]);

  return (
    <div className="shell">
      <a href="#main" className="skip" onClick={(e) => { e.preventDefault(); mainRef.current?.focus(); }}>
        Skip to content
      </a>
      <header className="topbar">
        <button type="button" className="menu-button" aria-expanded={menuOpen} aria-controls="nav" onClick={() => setMenuOpen((o) => !o)}>
          <span aria-hidden="true">☰</span>
          <span className="sr-only">Menu</span>
        </button>
        <Link to="/" className="brand">flux7<span className="brand-sub"> console</span></Link>
        <div className="topbar-right">
          <WhoAmI />
          <ConnectionDot />
          <button type="button" className="ghost" onClick={nextTheme} title="Switch theme: system, dark, light">
            Theme: {theme}
          </button>
        </div>
      </header>
      <div className="body">
        <nav id="nav" className={`nav ${menuOpen ? "nav-open" : ""}`} aria-label="Pages">
          <ul>
            {NAV.map((n) => (
              <li key={n.to}>
                <Link to={n.to} aria-current={isCurrent(n.to, loc.path) ? "page" : undefined}>
                  {n.label}
                  {n.to === "/approvals" ? <PendingCount /> : null}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <main id="main" ref={mainRef} tabIndex={-1}>
          <HaltBanner />
          {node}
        </main>
      </div>
    </div>
  );
}
