// Hash routes to views; each route change disposes the previous view.

import { notice } from "./dom.js";
import { compareView } from "./page_compare.js";
import { episodeView } from "./page_episode.js";
import { runView } from "./page_run.js";
import { runsView } from "./page_runs.js";
import { viewContext } from "./view.js";

const ROUTES = [
  [/^\/run\/([^/]+)\/episode\/(\d+)$/, (ctx, m) => episodeView(ctx, decodeURIComponent(m[1]), Number(m[2]))],
  [/^\/run\/([^/]+)$/, (ctx, m) => runView(ctx, decodeURIComponent(m[1]))],
  [/^\/compare$/, (ctx, _m, query) => compareView(ctx, query)],
  [/^\/?$/, (ctx, _m, query) => runsView(ctx, query)],
];

let currentView = null;

export function route() {
  currentView?.dispose();
  const root = document.getElementById("view");
  root.replaceChildren();
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  currentView = viewContext(root);
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active",
    a.dataset.nav === (path.startsWith("/compare") ? "compare" : "runs")));
  for (const [pattern, view] of ROUTES) {
    const match = pattern.exec(path || "/");
    if (match) {
      view(currentView, match, new URLSearchParams(query));
      window.scrollTo(0, 0);
      return;
    }
  }
  root.append(notice(`No page at ${location.hash}.`, "error"));
}
