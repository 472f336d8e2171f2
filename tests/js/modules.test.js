// Every module of the page loads: its imports name exports that exist (a typo or a moved
// helper fails here, not in a researcher's browser), and importing it touches no DOM.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { test } from "node:test";

const WEB_JS = new URL("../../src/agentcanvas/api/web/js/", import.meta.url);
// main.js starts the app (router, WebSocket): the only module that acts when imported.
const modules = readdirSync(WEB_JS).filter((name) => name.endsWith(".js") && name !== "main.js");

test("every module of the dashboard links and imports without a DOM", async () => {
  globalThis.location ??= new URL("http://127.0.0.1:8000/?token=t"); // api.js reads its token
  assert.ok(modules.length > 20, modules);
  for (const name of modules) {
    const loaded = await import(new URL(name, WEB_JS));
    assert.ok(Object.keys(loaded).length > 0, `${name} exports nothing`);
  }
});
