"""Settings: config.yaml plus environment, validated once at the entry point into frozen Structs."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import pwd
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

import msgspec

from flux7.shared.auth.redirect_uris import APP_SCHEMES, app_scheme_problem
from flux7.shared.durations import parse_duration
from flux7.shared.errors import ConfigError
from flux7.shared.notify.settings import NotifySettings, validate_notify
from flux7.shared.safe_yaml import load_yaml

__all__ = [
    "ApprovalSettings",
    "AuthSettings",
    "CliCommand",
    "CliTool",
    "Condition",
    "ConfigChoice",
    "ConsoleSettings",
    "DecisionSettings",
    "GovernanceSettings",
    "JwtSettings",
    "LoopDetection",
    "McpServer",
    "McpSettings",
    "MemorySettings",
    "MetricsSettings",
    "OAuthSettings",
    "OidcRole",
    "OidcSettings",
    "OpenApiSource",
    "OutboundSettings",
    "Policy",
    "RateLimit",
    "Rule",
    "Settings",
    "SupervisorSettings",
    "TlsSettings",
    "UpstreamTimeouts",
    "choose_config",
    "config_id",
    "load_policy_dir",
    "load_settings",
    "parse_policy",
    "user_data_dir",
    "with_cli_openapi",
]

Action = Literal["allow", "deny", "human_approval"]

MIN_SIGNING_KEY = 32  # characters of decisions.signing_key: a guessable key would let anyone sign a precedent


class JwtSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    jwks_url: str = ""
    issuer: str = ""
    audience: str = ""
    agent_claim: str = "sub"
    user_claim: str = ""
    allow_legacy: bool = False


UserRole = Literal["owner", "admin", "approver", "viewer"]


class OidcRole(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What one value of the role claim gives a user: a role and, for an approver, its scope (globs)."""

    role: UserRole
    approve_tools: tuple[str, ...] = ()
    approve_agents: tuple[str, ...] = ()


class OidcSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Single sign-on for the console (docs/security.md "Single sign-on"): OpenID Connect, authorization code
    with PKCE, the provider found by discovery from `issuer`."""

    issuer: str
    client_id: str
    client_secret: str = ""  # empty: a public client (PKCE alone)
    scopes: tuple[str, ...] = ("openid", "email", "profile")
    # the claim that names the user: "" takes preferred_username, else email
    name_claim: str = ""
    role_claim: str = "groups"  # a dotted path into the ID token's claims (realm_access.roles); a string or a list
    roles: dict[str, UserRole | OidcRole] = {}
    default_role: Literal["", "owner", "admin", "approver", "viewer"] = ""  # "": unmapped users are refused
    label: str = ""  # the console's button: "Sign in with <label>" (default: the issuer's host)


class AuthSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    admin_token: str = ""
    # Where the generated admin token lives when admin_token is empty (default: beside the database).
    admin_token_file: str = ""
    # With no admin_token: create none and let the control plane trust every loopback caller (tests, demos).
    open_loopback: bool = False
    require_authentication: bool = False
    # None: believed only on a loopback bind. True restores the reference (any claim, anonymous) anywhere.
    allow_claimed_identity: bool | None = None
    resource_url: str = ""  # the public base URL named in /.well-known/oauth-protected-resource
    jwt: JwtSettings | None = None
    oidc: OidcSettings | None = None  # single sign-on for the console
    session_hours: float = 12  # how long a console session (a login by SSO or personal token) lasts


class OAuthSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """flux7 as the OAuth 2.1 authorization server of its /mcp (docs/managed-agents.md): registration is open,
    nothing is granted until a named human consents."""

    enabled: bool = True
    access_token_seconds: int = 3600
    refresh_token_seconds: int = 30 * 86400  # each refresh starts a new period (rotation)
    consent_seconds: int = 900  # how long an authorization request waits for a human's decision
    # Desktop apps' own redirect schemes accepted at registration (shared/auth/oauth_clients.py), beside https,
    # loopback http and reverse-domain schemes
    redirect_schemes: tuple[str, ...] = APP_SCHEMES
    # Client ID Metadata Documents (shared/auth/client_metadata.py): an https URL as a client id, its document
    # fetched through the outbound guard; the networks beside the public internet it may be fetched from, and a
    # private CA for its host
    client_metadata_documents: bool = True
    client_metadata_networks: tuple[str, ...] = ()
    client_metadata_ca_file: str = ""
    # Registration is open: how many clients one address may register in a minute (0: no limit)
    registrations_per_minute: int = 20


class TlsSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    cert_file: str = ""
    key_file: str = ""


class ApprovalSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    timeout_seconds: float = 300
    notify_url: str = ""
    # Standard Webhooks secret (whsec_…) signing notify_url deliveries; empty: notify-webhook.secret in the data dir
    notify_secret: str = ""
    channel: Literal["queue", "tty", "tty-fallback"] = "tty-fallback"
    wait_seconds: float = 0


class SupervisorSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = False
    expose_content: bool = True
    auto_approve: bool | None = None  # None: on when memory is reachable (CONTRACT 1.2)
    min_approvals: int = 3
    auto_approve_writes: bool = False
    supervisor_agents: tuple[str, ...] = ()


class MemorySettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    url: str = ""
    token: str = ""
    # flux7 additions: the in-process memory role
    enabled: bool = True
    dir: str = ""  # workspace root; default: beside storage_path
    max_entries: int = 10000
    chain_key: str = ""
    scopes: str = ""
    hybrid: bool = True
    embed_url: str = ""
    embed_model: str = ""
    embed_provider: Literal["", "ollama", "openai"] = ""
    embed_key: str = ""
    rerank_url: str = ""
    rerank_model: str = ""
    min_similarity: float | None = None  # None: the embedding model's calibrated floor (0.30 for the local one)
    # PostgreSQL's full-text configuration for memory search (docs/memory.md); SQLite's FTS5 has one tokenizer.
    text_search_config: Literal["simple", "english"] = "simple"


class DecisionSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Decision facts (CONTRACT 1.16): how the mesh signs them, and how its outbox retries memory."""

    signing_key: str = ""  # empty: a secret file `decisions.key` (0600) created in the data directory
    retry_max_seconds: float = 30


class Condition(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    field: str
    operator: str
    value: float | str | list[float | str] | None = None


class Rule(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    tools: tuple[str, ...]
    action: Action
    condition: Condition | None = None
    # four eyes: a human_approval this rule decides waits for this many distinct humans (one deny ends it)
    approvals: Annotated[int, msgspec.Meta(ge=1, le=10)] = 1


class RateLimit(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    max_per_minute: int = 0
    max_total: int = 0


class ToolLimit(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A budget for the policy's agent on each tool the globs match, counted per tool."""

    tools: tuple[str, ...]
    max_per_minute: int = 0
    max_total: int = 0


class Policy(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    agent: str = "*"
    rate_limit: RateLimit | None = None
    tool_limits: tuple[ToolLimit, ...] = ()
    rules: tuple[Rule, ...] = ()
    source_file: str = ""


class LoopDetection(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = False
    threshold: int = 3
    window_seconds: float = 10


class UpstreamTimeouts(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """`timeout: {connect: 5s, read: 30s}` on an upstream; Go durations, "" for the default (docs/upstreams.md)."""

    connect: str = ""  # opening the TCP (and TLS) connection
    read: str = ""  # from the request sent to the whole answer

    def seconds(self, connect: float, read: float) -> tuple[float, float]:
        """(connect, read) in seconds, the given defaults where unset. Validated at load (_validate)."""
        return (
            parse_duration(self.connect) if self.connect else connect,
            parse_duration(self.read) if self.read else read,
        )


class McpServer(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    transport: Literal["stdio", "sse", "streamable-http"] = "stdio"
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    url: str = ""
    headers: dict[str, str] = {}
    forward_identity: bool = False
    timeout: UpstreamTimeouts = UpstreamTimeouts()


class McpSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The mesh as an MCP server. `result_shape: reference` restores the reference's tools/call shape (every
    result one text block of indented JSON, an upstream's result wrapped twice, a policy denial not an error)
    and its bare tools/list entries; the default passes upstream results and tool definitions on verbatim
    (docs/mcp.md)."""

    result_shape: Literal["faithful", "reference"] = "faithful"


class CliCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    allowed_args: tuple[str, ...] = ()
    timeout: str = "30s"


class CliTool(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    bin: str
    default_action: Literal["", "allow", "deny", "human_approval"] = ""
    strict: bool = False
    working_dir: str = ""
    env: dict[str, str] = {}
    commands: dict[str, CliCommand] = {}
    bare: CliCommand | None = None


class OpenApiSource(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    url: str = ""
    file: str = ""
    backend_url: str = ""
    headers: dict[str, str] = {}  # sent to the backend on every call (credentials: use ${VAR})
    timeout: UpstreamTimeouts = UpstreamTimeouts()


class OutboundSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Networks (CIDRs) a caller-supplied URL may reach besides globally routable addresses (shared/outbound.py).
    allow_networks: tuple[str, ...] = ()


class ConsoleSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    allowed_origins: tuple[str, ...] = ()
    cors: bool = False  # answer CORS (preflights, Access-Control-*) for allowed_origins; off unless asked
    dist_dir: str = ""


class MetricsSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Caps on distinct `tool` and `agent` label values in /metrics; later values are counted as `other`."""

    max_tools: int = 50
    max_agents: int = 20


class GovernanceSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The governance engine (docs/governance.md): its rules, behaviour window and escalation."""

    rules_file: str = ""  # governance rules YAML; empty: the built-in rules
    window_days: int = 7  # the behaviour window scores read
    escalate_after: int = 3  # a finding repeated this many periods in a row goes one severity up (0: never)
    escalation_period_seconds: float = 86400  # at most one occurrence of a finding counted per period
    refresh_seconds: float = 60  # a read older than this folds in new traces first


# How long a worker has to stop after SIGTERM before granian kills it. granian waits for every request in flight,
# and a call held for a human (approval.timeout_seconds, minutes) or a stuck worker would keep the server up past
# systemd's or Fly's stop timeout, which then kills Litestream before it ships the last commits. A kill loses
# nothing acknowledged: every answer is sent after its commit, and a pending approval lives in the database.
STOP_TIMEOUT_SECONDS = 10


def user_data_dir(env: Mapping[str, str]) -> Path:
    """Where the built-in defaults keep the service's state (database, admin token, decision key, memory):
    `$XDG_DATA_HOME/flux7`, else `~/.local/share/flux7`; never the current folder, which may be a checkout an
    agent works in. The XDG base directory rules: a relative XDG_DATA_HOME is ignored."""
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "flux7"
    return Path(_home(env)) / ".local" / "share" / "flux7"


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir  # the account's home when HOME is unset


LOCAL_CONFIG = "config.yaml"


class ConfigChoice(msgspec.Struct, frozen=True, kw_only=True):
    """Which config file a command uses, and why (docs/cli.md, "Which config"): `--config`, else $FLUX7_CONFIG,
    else ./config.yaml, else none (the built-in defaults, their state in `data_dir`)."""

    path: str | None  # None: the built-in defaults
    source: Literal["--config", "FLUX7_CONFIG", "./config.yaml", "defaults"]
    data_dir: str = ""  # the built-in defaults' data directory (user_data_dir)

    @property
    def chosen(self) -> bool:
        """Named by the user (--config, FLUX7_CONFIG) rather than found."""
        return self.source in ("--config", "FLUX7_CONFIG")

    def why(self) -> str:
        if self.source == "--config":
            return f"{self.path} (--config)"
        if self.source == "FLUX7_CONFIG":
            return f"{self.path} (FLUX7_CONFIG)"
        if self.source == "./config.yaml":
            return f"{self.path} (found in the current folder; no --config or FLUX7_CONFIG)"
        return f"the built-in defaults, state in {self.data_dir} (no --config, FLUX7_CONFIG or ./config.yaml)"


def choose_config(option: str | None, env: Mapping[str, str], cwd: Path | None = None) -> ConfigChoice:
    if option:
        return ConfigChoice(path=option, source="--config")
    if env.get("FLUX7_CONFIG"):
        return ConfigChoice(path=env["FLUX7_CONFIG"], source="FLUX7_CONFIG")
    local = (cwd or Path.cwd()) / LOCAL_CONFIG
    if local.is_file():
        return ConfigChoice(path=str(local), source="./config.yaml")
    return ConfigChoice(path=None, source="defaults", data_dir=str(user_data_dir(env)))


class Settings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    port: int = 9090
    host: str = "127.0.0.1"
    workers: int = 1
    stop_timeout_seconds: int = STOP_TIMEOUT_SECONDS  # after SIGTERM, then the workers still busy are killed
    # Relative to the config file's folder; without a config file load_settings puts it in user_data_dir().
    storage_path: str = "flux7.db"
    # The store: "" (the SQLite file at storage_path), or a postgresql:// URL (FLUX7_DATABASE_URL overrides it).
    # A path here is the SQLite file, as storage_path.
    database: str = ""
    trace_file: str = ""
    otel_endpoint: str = ""
    otel_headers: dict[str, str] = {}
    otel_ca_cert: str = ""
    otel_insecure_skip_verify: bool = False
    otel_traces_endpoint: str = ""  # the whole URL (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), used as given
    otel_protocol: Literal["http/protobuf", "http/json"] = "http/protobuf"
    otel_service_name: str = ""  # "" = service.name of otel_resource_attributes, else "flux7"
    otel_resource_attributes: dict[str, str] = {}
    otel_disabled: bool = False  # OTEL_SDK_DISABLED: no export (GET /otel-traces still answers)
    auth: AuthSettings = AuthSettings()
    oauth: OAuthSettings = OAuthSettings()
    tls: TlsSettings = TlsSettings()
    approval: ApprovalSettings = ApprovalSettings()
    supervisor: SupervisorSettings = SupervisorSettings()
    memory: MemorySettings = MemorySettings()
    decisions: DecisionSettings = DecisionSettings()
    policies: tuple[Policy, ...] = ()
    policy_dir: str = ""
    catalog_dir: str = ""
    governance: GovernanceSettings = GovernanceSettings()
    mcp_servers: tuple[McpServer, ...] = ()
    cli_tools: tuple[CliTool, ...] = ()
    openapi: tuple[OpenApiSource, ...] = ()
    hide_denied_tools: bool = False
    pin_tools: bool = False
    mcp: McpSettings = McpSettings()
    loop_detection: LoopDetection = LoopDetection()
    console: ConsoleSettings = ConsoleSettings()
    outbound: OutboundSettings = OutboundSettings()
    metrics: MetricsSettings = MetricsSettings()
    notify: NotifySettings = NotifySettings()
    max_body_bytes: int = 8 * 1024 * 1024
    access_log: bool = True  # granian's access log, one line per request on stdout (`flux7 serve --no-access-log`)
    # Not config keys: filled by the loader.
    config_path: str = ""
    trace_key: str = ""
    home: str = ""  # what a leading `~` in a path stands for (the environment's HOME)

    @property
    def config_dir(self) -> Path:
        return Path(self.config_path).parent if self.config_path else Path.cwd()

    @property
    def auto_approve_enabled(self) -> bool:
        if self.supervisor.auto_approve is not None:
            return self.supervisor.auto_approve
        return bool(self.memory.url) or self.memory.enabled

    def resolve_path(self, value: str) -> Path:
        if self.home and (value == "~" or value.startswith("~/")):
            p = Path(self.home) / value[2:]
        else:
            p = Path(value).expanduser()
        return p if p.is_absolute() else self.config_dir / p


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Keys whose values get ${VAR} expansion (CONTRACT 1.2 marks these).
_EXPANDED = {
    ("otel_headers",),
    ("memory", "token"),
    ("mcp_servers", "headers"),
    ("openapi", "headers"),
    ("auth", "admin_token"),
    ("auth", "oidc", "client_secret"),
    ("decisions", "signing_key"),
    ("approval", "notify_secret"),
    ("notify", "link_secret"),
    ("notify", "slack", "bot_token"),
    ("notify", "slack", "signing_secret"),
    ("notify", "email", "username"),
    ("notify", "email", "password"),
}


def _expand(value: str, env: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1), ""), value)


def _expand_tree(data: Any, env: Mapping[str, str], path: tuple[str, ...] = ()) -> Any:
    if isinstance(data, dict):
        return {k: _expand_tree(v, env, (*path, str(k))) for k, v in data.items()}
    if isinstance(data, list):
        return [_expand_tree(v, env, path) for v in data]
    if isinstance(data, str) and any(path[: len(e)] == e for e in _EXPANDED):
        return _expand(data, env)
    return data


def _fault(file: str, err: msgspec.ValidationError) -> ConfigError:
    text = str(err)
    key = "$"
    if " - at `" in text:
        text, _, at = text.rpartition(" - at `")
        key = at.rstrip("`")
    return ConfigError(file, key.replace("$.", "", 1) if key != "$" else "(top level)", text)


def _validate_policy(file: str, key: str, policy: Policy) -> None:
    for i, limit in enumerate(policy.tool_limits):
        where = f"{key}.tool_limits[{i}]"
        if not limit.tools:
            raise ConfigError(file, f"{where}.tools", "at least one tool glob is required")
        if limit.max_per_minute < 0 or limit.max_total < 0:
            raise ConfigError(file, where, "limits are counts: 0 (no limit) or more")
        if limit.max_per_minute == 0 and limit.max_total == 0:
            raise ConfigError(file, where, "set max_per_minute, max_total or both")
    for i, rule in enumerate(policy.rules):
        if not rule.tools:
            raise ConfigError(file, f"{key}.rules[{i}].tools", "at least one tool glob is required")


def _validate_timeouts(file: str, key: str, t: UpstreamTimeouts) -> None:
    for name, value in (("connect", t.connect), ("read", t.read)):
        if not value:
            continue
        try:
            seconds = parse_duration(value)
        except ValueError as e:
            raise ConfigError(file, f"{key}.{name}", str(e)) from None
        if seconds <= 0:
            raise ConfigError(file, f"{key}.{name}", "must be > 0")


def _validate_oidc(file: str, o: OidcSettings) -> None:
    try:
        parts = urlsplit(o.issuer)
        host = parts.hostname or ""
    except ValueError:
        parts, host = None, ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if (
        parts is None
        or not host
        or parts.query
        or parts.fragment
        or not (parts.scheme == "https" or (parts.scheme == "http" and loopback))
    ):
        raise ConfigError(
            file,
            "auth.oidc.issuer",
            "the provider's https URL (http only on loopback), e.g. https://accounts.google.com",
        )
    if not o.client_id.strip():
        raise ConfigError(file, "auth.oidc.client_id", "required: the client id registered with the provider")
    if "openid" not in o.scopes:
        raise ConfigError(file, "auth.oidc.scopes", "must include openid")
    if not o.role_claim.strip():
        raise ConfigError(file, "auth.oidc.role_claim", "the claim (dotted path) whose values map to roles")
    if not o.roles and not o.default_role:
        raise ConfigError(file, "auth.oidc.roles", "map at least one claim value to a role, or set default_role")
    for value, grant in o.roles.items():
        if isinstance(grant, OidcRole) and (grant.approve_tools or grant.approve_agents) and grant.role != "approver":
            raise ConfigError(file, f"auth.oidc.roles.{value}", "approve_tools and approve_agents scope an approver")


def _validate(file: str, s: Settings) -> None:
    names: set[str] = set()
    for i, p in enumerate(s.policies):
        if p.name in names:
            raise ConfigError(file, f"policies[{i}].name", f"duplicate policy name {p.name!r}")
        names.add(p.name)
        _validate_policy(file, f"policies[{i}]", p)
    for i, cli in enumerate(s.cli_tools):
        if cli.bare is not None and (cli.commands or cli.strict):
            raise ConfigError(file, f"cli_tools[{i}].bare", "bare excludes commands and strict")
        if cli.strict and not cli.commands:
            raise ConfigError(file, f"cli_tools[{i}].strict", "strict needs at least one command")
        for sub, cmd in {**cli.commands, **({"bare": cli.bare} if cli.bare else {})}.items():
            try:
                parse_duration(cmd.timeout)
            except ValueError as e:
                raise ConfigError(file, f"cli_tools[{i}].commands.{sub}.timeout", str(e)) from None
    for i, o in enumerate(s.openapi):
        if bool(o.url) == bool(o.file):
            raise ConfigError(file, f"openapi[{i}]", "exactly one of url and file is required")
        _validate_timeouts(file, f"openapi[{i}].timeout", o.timeout)
    for i, m in enumerate(s.mcp_servers):
        _validate_timeouts(file, f"mcp_servers[{i}].timeout", m.timeout)
        if m.transport == "stdio" and not m.command:
            raise ConfigError(file, f"mcp_servers[{i}].command", "stdio transport needs a command")
        if m.transport != "stdio" and not m.url:
            raise ConfigError(file, f"mcp_servers[{i}].url", f"{m.transport} transport needs a url")
    url = s.auth.resource_url
    if url and (not url.startswith(("https://", "http://")) or "?" in url or "#" in url):
        raise ConfigError(file, "auth.resource_url", "an http(s) base URL such as https://mesh.example.com")
    for key in ("access_token_seconds", "refresh_token_seconds", "consent_seconds"):
        if not 1 <= getattr(s.oauth, key) <= 10 * 365 * 86400:
            raise ConfigError(file, f"oauth.{key}", "seconds: at least 1, at most ten years")
    if s.oauth.registrations_per_minute < 0:
        raise ConfigError(file, "oauth.registrations_per_minute", "a count: 0 (no limit) or more")
    for i, scheme in enumerate(s.oauth.redirect_schemes):
        if problem := app_scheme_problem(scheme):
            raise ConfigError(file, f"oauth.redirect_schemes[{i}]", f"{scheme!r}: {problem}")
    for i, network in enumerate(s.oauth.client_metadata_networks):
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise ConfigError(
                file, f"oauth.client_metadata_networks[{i}]", f"{network!r}: a network such as 10.0.0.0/8"
            ) from None
    ca_file = s.oauth.client_metadata_ca_file
    if ca_file and not Path(ca_file).is_file():
        raise ConfigError(file, "oauth.client_metadata_ca_file", f"{ca_file}: no such file")
    if s.auth.jwt is not None and not s.auth.jwt.jwks_url:
        raise ConfigError(file, "auth.jwt.jwks_url", "required when auth.jwt is set")
    if s.auth.oidc is not None:
        _validate_oidc(file, s.auth.oidc)
    if not 0 < s.auth.session_hours <= 24 * 90:
        raise ConfigError(file, "auth.session_hours", "hours a console session lasts: more than 0, at most 2160")
    if (s.tls.cert_file and not s.tls.key_file) or (s.tls.key_file and not s.tls.cert_file):
        raise ConfigError(file, "tls", "cert_file and key_file go together")
    if s.console.cors and not s.console.allowed_origins:
        raise ConfigError(file, "console.cors", "needs console.allowed_origins (the origins CORS answers)")
    if s.approval.timeout_seconds <= 0:
        raise ConfigError(file, "approval.timeout_seconds", "must be > 0")
    floor = s.memory.min_similarity
    if floor is not None and not -1.0 <= floor <= 1.0:
        raise ConfigError(file, "memory.min_similarity", f"a cosine similarity is between -1 and 1, got {floor}")
    for i, net in enumerate(s.outbound.allow_networks):
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError as e:
            raise ConfigError(file, f"outbound.allow_networks[{i}]", f"not a network (CIDR): {e}") from None
    if s.otel_traces_endpoint and not s.otel_traces_endpoint.startswith(("http://", "https://")):
        raise ConfigError(file, "otel_traces_endpoint", "the whole OTLP/HTTP URL, such as http://host:4318/v1/traces")
    if s.stop_timeout_seconds < 1:
        raise ConfigError(file, "stop_timeout_seconds", "must be >= 1 (seconds a worker has to stop after SIGTERM)")
    for key in ("max_tools", "max_agents"):
        if getattr(s.metrics, key) < 1:
            raise ConfigError(file, f"metrics.{key}", "must be >= 1")
    if s.decisions.signing_key and len(s.decisions.signing_key) < MIN_SIGNING_KEY:
        raise ConfigError(
            file, "decisions.signing_key", f"at least {MIN_SIGNING_KEY} characters (e.g. `openssl rand -hex 32`)"
        )
    g = s.governance
    if g.window_days < 1:
        raise ConfigError(file, "governance.window_days", "must be >= 1")
    if g.escalate_after < 0:
        raise ConfigError(file, "governance.escalate_after", "must be >= 0 (0: never escalate)")
    if g.escalation_period_seconds < 0 or g.refresh_seconds < 0:
        raise ConfigError(file, "governance", "escalation_period_seconds and refresh_seconds are >= 0")
    if s.decisions.retry_max_seconds <= 0:
        raise ConfigError(file, "decisions.retry_max_seconds", "must be > 0")
    if s.approval.notify_secret and not s.approval.notify_secret.startswith("whsec_"):
        raise ConfigError(file, "approval.notify_secret", "a Standard Webhooks secret: whsec_ and base64")
    validate_notify(file, s.notify)
    if s.database and s.trace_file:
        # Every instance would append only its own calls to its own file: no file holds the whole chain, and
        # each instance's /traces/verify would report a break.
        raise ConfigError(
            file,
            "trace_file",
            "not with a PostgreSQL database: the one trace chain is in the database (GET /traces/verify walks "
            "it); remove trace_file",
        )


def parse_policy(text: str | bytes, source: str) -> Policy:
    """One policy file's text (or bytes, UTF-8), as the loader reads it. Raises ConfigError naming `source`
    (also for a file too big, too deep or not UTF-8: shared/safe_yaml.py)."""
    raw = load_yaml(text, source) or {}
    if not isinstance(raw, dict):
        raise ConfigError(source, "(top level)", "a policy file holds one mapping")
    if not raw.get("name"):
        raise ConfigError(source, "name", "a policy needs a name")
    raw["source_file"] = source
    try:
        policy = msgspec.convert(raw, Policy, strict=False)
    except msgspec.ValidationError as e:
        raise _fault(source, e) from None
    _validate_policy(source, "(policy)", policy)
    return policy


def load_policy_dir(directory: Path) -> list[Policy]:
    """Each *.yaml in the directory holds one policy with a name. Raises ConfigError naming the file."""
    policies = []
    for file in sorted(directory.glob("*.yaml")):
        try:
            data = file.read_bytes()
        except OSError as e:
            raise ConfigError(str(file), "(file)", e.strerror or str(e)) from None
        policies.append(parse_policy(data, str(file)))
    return policies


_OTEL_PROTOCOLS = ("http/protobuf", "http/json")


def _otel_pairs(name: str, value: str) -> dict[str, str]:
    """`key1=value1,key2=value2` with percent-encoded values (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES)."""
    out: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        key, eq, val = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError("(environment)", name, f"expected key=value pairs separated by commas, got {item!r}")
        out[unquote(key.strip())] = unquote(val.strip())
    return out


def _otel_env(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    """The standard OTEL_* variables, where the config file (or an override) does not set the same thing: the
    file wins, as programmatic configuration wins over the environment in OpenTelemetry SDKs (docs/traces.md)."""
    if "otel_disabled" not in raw and "OTEL_SDK_DISABLED" in env:
        raw["otel_disabled"] = env["OTEL_SDK_DISABLED"].strip().lower() == "true"
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter not in ("", "otlp", "none", "console"):
        raise ConfigError("(environment)", "OTEL_TRACES_EXPORTER", f"otlp, console or none, got {exporter!r}")
    if exporter == "none" and "otel_disabled" not in raw:
        raw["otel_disabled"] = True
    if exporter == "console" and "otel_endpoint" not in raw and "otel_traces_endpoint" not in raw:
        raw["otel_endpoint"] = "stdout"  # written to stderr: stdout may carry the MCP stdio protocol
    if "otel_endpoint" not in raw and "otel_traces_endpoint" not in raw:
        for name, key in (
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel_traces_endpoint"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_endpoint"),
        ):
            url = env.get(name, "").strip()
            if not url:
                continue
            if not url.startswith(("http://", "https://")):
                raise ConfigError("(environment)", name, f"an http(s) URL such as http://localhost:4318, got {url!r}")
            raw[key] = url
            break
    if "otel_protocol" not in raw:
        for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = env.get(name, "").strip()
            if not protocol:
                continue
            if protocol not in _OTEL_PROTOCOLS:
                hint = " (gRPC is not supported)" if protocol == "grpc" else ""
                raise ConfigError("(environment)", name, f"http/protobuf or http/json, got {protocol!r}{hint}")
            raw["otel_protocol"] = protocol
            break
    if "otel_ca_cert" not in raw:
        for name in ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"):
            if env.get(name, "").strip():
                raw["otel_ca_cert"] = env[name].strip()
                break
    headers: dict[str, str] = {}
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):  # the traces one wins
        headers.update(_otel_pairs(name, env.get(name, "")))
    if headers:
        file_headers = raw.get("otel_headers")
        raw["otel_headers"] = {**headers, **(file_headers if isinstance(file_headers, dict) else {})}
    attributes = _otel_pairs("OTEL_RESOURCE_ATTRIBUTES", env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    if attributes:
        file_attributes = raw.get("otel_resource_attributes")
        extra = file_attributes if isinstance(file_attributes, dict) else {}
        raw["otel_resource_attributes"] = {**attributes, **extra}
    if "otel_service_name" not in raw and env.get("OTEL_SERVICE_NAME", "").strip():
        raw["otel_service_name"] = env["OTEL_SERVICE_NAME"].strip()


def load_settings(path: str | Path | None, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Read config.yaml (or defaults when path is None) and the environment; raise ConfigError on any fault.
    Without a config file the state goes to the per-user data directory (user_data_dir), unless an override
    names storage_path."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    file = "(defaults)"
    if path is not None:
        file = str(Path(path).resolve())
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise ConfigError(file, "(file)", e.strerror or str(e)) from None
        loaded = load_yaml(data, file)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(file, "(top level)", "the config must be a mapping")
        raw = _expand_tree(loaded or {}, env)
    for key in ("config_path", "trace_key", "home"):
        if key in raw:
            raise ConfigError(file, key, "Object contains unknown field")
    raw.update({k: v for k, v in overrides.items() if v is not None})
    _otel_env(raw, env)
    raw["config_path"] = file if path is not None else ""
    raw["trace_key"] = env.get("MESH_TRACE_KEY", "")
    raw["home"] = _home(env)
    if env.get("FLUX7_DATABASE_URL", "").strip() and overrides.get("database") is None:
        raw["database"] = env["FLUX7_DATABASE_URL"].strip()
    _database(file, raw)
    if path is None and not raw.get("storage_path"):
        raw["storage_path"] = str(user_data_dir(env) / "flux7.db")
    if env.get("MESH_ADMIN_TOKEN"):
        raw.setdefault("auth", {})
        raw["auth"] = {**(raw["auth"] or {}), "admin_token": env["MESH_ADMIN_TOKEN"]}
    try:
        settings = msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as e:
        raise _fault(file, e) from None
    _validate(file, settings)
    if settings.policy_dir:
        directory = settings.resolve_path(settings.policy_dir)
        if not directory.is_dir():
            raise ConfigError(file, "policy_dir", f"not a directory: {directory}")
        extra = load_policy_dir(directory)
        settings = msgspec.structs.replace(settings, policies=(*settings.policies, *extra))
        _validate(file, settings)
    if settings.catalog_dir and not settings.resolve_path(settings.catalog_dir).is_dir():
        raise ConfigError(file, "catalog_dir", f"not a directory: {settings.resolve_path(settings.catalog_dir)}")
    if settings.governance.rules_file and not settings.resolve_path(settings.governance.rules_file).is_file():
        raise ConfigError(
            file, "governance.rules_file", f"not a file: {settings.resolve_path(settings.governance.rules_file)}"
        )
    return settings


def _database(file: str, raw: dict[str, Any]) -> None:
    """`database`: a postgresql:// URL, or a SQLite path (which is storage_path, said another way)."""
    value = raw.get("database")
    if value is None or value == "":
        return
    if not isinstance(value, str):
        raise ConfigError(file, "database", "expected a postgresql:// URL or a SQLite file path")
    value = value.strip()
    if value.startswith(("postgresql://", "postgres://")):
        raw["database"] = value
        return
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        raise ConfigError(file, "database", f"a postgresql:// URL or a SQLite file path, got {value.split(':')[0]}://")
    raw["storage_path"] = value
    raw["database"] = ""


def config_id(settings: Settings) -> str:
    """The /health `config` id: a hash of the config file's absolute path (stdio relay matching)."""
    return hashlib.sha256(settings.config_path.encode()).hexdigest()[:16]


def with_cli_openapi(settings: Settings, url: str, backend: str) -> Settings:
    """`mesh7 --openapi URL --backend URL`: one more OpenAPI source on top of the config's."""
    if not url:
        return settings
    source = OpenApiSource(url=url, backend_url=backend)
    return msgspec.structs.replace(settings, openapi=(*settings.openapi, source))
