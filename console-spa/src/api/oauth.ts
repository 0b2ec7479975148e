// flux7 as the OAuth authorization server of /mcp (docs/managed-agents.md): the consent a human gives a client,
// and the connections it made.
import { useQuery } from "@tanstack/react-query";
import { mesh, seg } from "./client";

export interface OAuthClient {
  client_id: string;
  client_name: string;
  redirect_uris: string[];
  redirect_hosts: string[];
  token_endpoint_auth_method: string;
  created_at: number;
  client_uri?: string;
  software_id?: string;
  software_version?: string;
  deleted?: boolean;
}

export interface ConsentRequest {
  id: string;
  state: "pending" | "approved" | "denied" | "expired";
  client: OAuthClient;
  redirect_uri: string;
  redirect_host: string;
  agent: string;
  proposed_agent: string;
  scopes: string[];
  requested_scope: string;
  resource: string;
  policies: { name: string; agent: string }[];
  active_connections: number;
  created_at: number;
  expires_at: number;
  decided_by?: string;
}

export interface ConsentDecision {
  id: string;
  state: string;
  agent: string;
  redirect_to: string;
}

export interface OAuthConnection {
  id: string;
  client_id: string;
  client_name: string;
  agent_id: string;
  granted_by: string;
  scope: string;
  resource: string;
  state: "active" | "expired" | "revoked";
  created_at: number;
  expires_at: number | null;
  refresh_expires_at: number | null;
  last_used_at: number | null;
  revoked_at: number | null;
  revoked_by: string;
}

/** The agent id rule of shared/auth/tokens.py validate_agent_id. */
export function agentIdProblem(id: string): string {
  if (!id) return "an agent id is required";
  if (!/^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$/.test(id)) {
    return "1-128 characters: letters, digits and . _ : @ / + -, starting with a letter or digit";
  }
  return "";
}

/** Epoch seconds as an ISO time, for <Time>. */
export const isoOf = (seconds: number | null | undefined): string | null =>
  seconds == null ? null : new Date(seconds * 1000).toISOString();

export const useConsentRequest = (id: string, agent: string) =>
  useQuery({
    queryKey: ["oauth-request", id, agent],
    queryFn: ({ signal }) => mesh.get<ConsentRequest>(`/oauth/requests/${seg(id)}`, { agent }, signal),
    enabled: !!id,
    placeholderData: (previous) => previous,
  });

export const useConnections = () =>
  useQuery({
    queryKey: ["oauth-connections"],
    queryFn: ({ signal }) => mesh.get<OAuthConnection[]>("/oauth/tokens", undefined, signal),
    refetchInterval: 15_000,
  });

export const useOAuthClients = () =>
  useQuery({
    queryKey: ["oauth-clients"],
    queryFn: ({ signal }) => mesh.get<OAuthClient[]>("/oauth/clients", undefined, signal),
    refetchInterval: 30_000,
  });
