// AgentCanvas batch-eval dashboard: a single-page app on hash routes; no framework, no build.
//
//   #/                          runs and queue (progress pushed over /ws), start form
//   #/run/<id>                  one run: config, graph, aggregates, per task, episodes
//   #/run/<id>/episode/<idx>    one episode: frame player, firing log, episode.json
//   #/compare?a=<id>&b=<id>     two runs paired by (task, episode_index)
//
// Server data is only ever written with textContent / setAttribute, never as HTML.
// Large lists are paginated on the server (runs, episodes); WebSocket events are coalesced
// and applied to the affected rows in place, at most every ROW_FLUSH_MS (page_runs.js).
//
// One concept per module: api.js (HTTP), live.js (WebSocket), view.js (view lifetime),
// dom.js / format.js (helpers), widgets (pager, charts, graph_view, run_rows, ...), one
// page_*.js per route, router.js (hash → page).

import { connectLive } from "./live.js";
import { route } from "./router.js";

window.addEventListener("hashchange", route);
connectLive();
route();
