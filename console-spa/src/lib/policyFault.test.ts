import { describe, expect, it } from "vitest";
import { faultLine, keyPath, lineOfKey } from "./policyFault";

const POLICY = `# the agents' policy
name: agents
agent: "*"
rules:
  - tools: ["delete_pet"]
    action: deny
  - tools: ["create_pet"]
    action: human_approval

  - tools: ["*"]
    action: maybe
`;

describe("the line of a policy fault", () => {
  it("reads the key paths the server names", () => {
    expect(keyPath("rules[2].action")).toEqual(["rules", 2, "action"]);
    expect(keyPath("(top level)")).toEqual([]);
    expect(keyPath("name")).toEqual(["name"]);
  });

  it("follows a key path through mappings and sequences, blank lines and comments", () => {
    expect(lineOfKey(POLICY, ["name"])).toBe(2);
    expect(lineOfKey(POLICY, ["rules"])).toBe(4);
    expect(lineOfKey(POLICY, ["rules", 0])).toBe(5);
    expect(lineOfKey(POLICY, ["rules", 2, "action"])).toBe(11);
    expect(lineOfKey(POLICY, ["rules", 1, "tools"])).toBe(7);
    // a sequence whose dashes sit at the key's own column
    expect(lineOfKey("name: a\nrules:\n- tools: [x]\n  action: allow\n- tools: [y]\n  actoin: deny\n", ["rules", 1, "actoin"])).toBe(6);
    // as deep as the text goes: a flow mapping holds the rest on its line
    expect(lineOfKey("name: a\nrules: [{tools: [x], action: nope}]\n", ["rules", 0, "action"])).toBe(2);
    expect(lineOfKey(POLICY, ["nothing"])).toBeNull();
  });

  it("takes the server's own line first, else its key and the unknown field it names", () => {
    expect(faultLine("name: a\n", { error: "(yaml): line 4, column 11: expected ',' or ']'", key: "(yaml)" })).toBe(4);
    expect(faultLine(POLICY, { error: "rules[2].action: Invalid enum value 'maybe'", key: "rules[2].action" })).toBe(11);
    const typo = "name: a\nrules:\n  - tools: [x]\n    action: allow\n  - tools: [y]\n    actoin: deny\n";
    expect(faultLine(typo, { error: "rules[1]: Object contains unknown field `actoin`", key: "rules[1]" })).toBe(6);
    expect(faultLine("name: a\nfoo: 1\n", { error: "(top level): Object contains unknown field `foo`", key: "(top level)" })).toBe(2);
    expect(faultLine(POLICY, { error: "duplicate policy name 'agents'", key: "name" })).toBe(2);
    expect(faultLine(POLICY, { error: "something else" })).toBeNull();
  });
});
