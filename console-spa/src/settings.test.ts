import { afterEach, describe, expect, it } from "vitest";
import { adoptTokenFromUrl, getSettings, saveSettings } from "./settings";

const EMPTY = { baseUrl: "", adminToken: "", memoryToken: "", supervisorUrl: "", supervisorToken: "" };

describe("a console link's #token=…", () => {
  afterEach(() => {
    saveSettings(EMPTY);
    window.history.replaceState(null, "", "/");
  });

  it("becomes the stored admin token and leaves the address bar", () => {
    saveSettings({ ...EMPTY, baseUrl: "http://127.0.0.1:9090" });
    window.history.replaceState(null, "", "/console/#token=abc%2Ddef_123");
    expect(adoptTokenFromUrl()).toBe(true);
    expect(getSettings().adminToken).toBe("abc-def_123");
    expect(getSettings().baseUrl).toBe("http://127.0.0.1:9090"); // the other settings stay
    expect(window.location.hash).toBe("#/");
    expect(window.location.href).not.toContain("abc");
    expect(JSON.parse(window.sessionStorage.getItem("flux7.console.connection") ?? "{}").adminToken).toBe("abc-def_123");
  });

  it("leaves a route's fragment and the settings alone", () => {
    saveSettings({ ...EMPTY, adminToken: "kept" });
    window.history.replaceState(null, "", "/console/#/approvals?tab=history");
    expect(adoptTokenFromUrl()).toBe(false);
    expect(window.location.hash).toBe("#/approvals?tab=history");
    expect(getSettings().adminToken).toBe("kept");
  });

  it("clears an empty or malformed token without storing it", () => {
    saveSettings({ ...EMPTY, adminToken: "kept" });
    window.history.replaceState(null, "", "/console/#token=%E0%A4%A");
    expect(adoptTokenFromUrl()).toBe(false);
    expect(window.location.hash).toBe("#/");
    expect(getSettings().adminToken).toBe("kept");
  });
});
