// Who is signed in (GET /login, which never answers 401), logging in and out, and the users of the server.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import type { Who } from "../lib/people";
import { useSettings } from "../settings";
import { mesh, seg } from "./client";

export interface LoginState {
  sso: boolean;
  sso_label: string;
  session_hours: number;
  who: Who | null;
}

export interface UserView {
  name: string;
  role: string;
  approve_tools: string[];
  approve_agents: string[];
  source: string;
  email?: string;
  created_at?: number;
  created_by?: string;
  disabled: boolean;
  token?: string;
}

/** The login state; its key follows the admin token so a token saved in Settings is seen at once. */
export function useLoginState() {
  const { adminToken, baseUrl } = useSettings();
  return useQuery({
    queryKey: ["login", baseUrl, adminToken],
    queryFn: ({ signal }) => mesh.get<LoginState>("/login", undefined, signal),
    refetchInterval: 60_000,
  });
}

/** Who the console acts as: null while unknown or when nobody is signed in. */
export function useWho(): Who | null {
  return useLoginState().data?.who ?? null;
}

export const loginWithToken = (token: string) => mesh.post<Who>("/login", { token });

export const logout = () => mesh.post<null>("/logout");

/** After a login or a logout every answer may change: forget them all. */
export function useSignedInOrOut() {
  const qc = useQueryClient();
  return () => qc.invalidateQueries();
}

export const useUsers = (enabled: boolean) =>
  useQuery({ queryKey: ["users"], queryFn: ({ signal }) => mesh.get<UserView[]>("/users", undefined, signal), enabled, refetchInterval: 30_000 });

export const addUser = (u: { name: string; role: string; approve_tools: string[]; approve_agents: string[]; email: string }) => mesh.post<UserView>("/users", u);
export const disableUser = (name: string) => mesh.post<UserView>(`/users/${seg(name)}/disable`);
export const rotateUser = (name: string) => mesh.post<UserView>(`/users/${seg(name)}/rotate`);

/** Whether the signed-in principal may change the control plane (an admin or an owner; the admin token). */
export const useWrites = (): boolean => {
  const who = useWho();
  return !who || who.role === "owner" || who.role === "admin";
};
