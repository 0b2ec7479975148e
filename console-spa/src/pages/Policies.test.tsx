import { fireEvent, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { connect, renderWithClient, serve, type TestServer } from "../test/harness";
import { PoliciesPage } from "./Policies";

let server: TestServer | null = null;
let saved = "";
beforeEach(() => {
  window.location.hash = "#/policies?tab=yaml&file=team";
  saved = "";
});
afterEach(async () => {
  await server?.close();
  server = null;
});

const start = async () => {
  server = await serve(({ method, path, body }) => {
    if (path === "/policy-files" && method === "GET") return { status: 200, body: ["team"] };
    if (path === "/policy-files/team" && method === "GET") return { status: 200, body: { name: "team", text: "policies: []\n" } };
    if (path === "/policy-files/team" && method === "PUT") {
      const text = (body as { text: string }).text;
      if (text.includes("maybe")) return { status: 400, body: { error: 'unknown action "maybe"', key: "policies[0].rules[0].action" } };
      saved = text;
      return { status: 200, body: { name: "team", reloaded: true } };
    }
    return undefined;
  });
  connect(server.url, "tok");
  renderWithClient(<PoliciesPage />);
  return (await screen.findByLabelText("YAML of team")) as HTMLTextAreaElement;
};

describe("policy YAML editor", () => {
  it("shows the server's validation fault inline and keeps the edit", async () => {
    const editor = await start();
    expect(editor.value).toBe("policies: []\n");
    fireEvent.change(editor, { target: { value: "policies:\n  - action: maybe\n" } });
    fireEvent.click(screen.getByRole("button", { name: "Save and reload" }));
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain('unknown action "maybe"');
    expect(alert.textContent).toContain("policies[0].rules[0].action");
    expect(editor.getAttribute("aria-invalid")).toBe("true");
    expect(editor.value).toBe("policies:\n  - action: maybe\n");
    expect(saved).toBe("");
  });

  it("saves valid YAML as {text} and reports the reload", async () => {
    const editor = await start();
    fireEvent.change(editor, { target: { value: "policies:\n  - action: allow\n" } });
    fireEvent.click(screen.getByRole("button", { name: "Save and reload" }));
    expect((await screen.findByRole("status")).textContent).toContain("the mesh reloaded its policies");
    expect(saved).toBe("policies:\n  - action: allow\n");
    await waitFor(() => expect(screen.queryByText("unsaved")).toBeNull());
  });
});
