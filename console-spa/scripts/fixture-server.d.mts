import type { IncomingMessage, Server, ServerResponse } from "node:http";
export const ADMIN_TOKEN: string;
export function handle(req: IncomingMessage, res: ServerResponse): Promise<void>;
export function start(port?: number): Promise<Server>;
