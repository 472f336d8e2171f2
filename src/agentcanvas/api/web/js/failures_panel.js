// The run page's Failures panel: the server's failure groups (GET …/failures) with their
// counts, their kind in words, tasks, an example message and links to their episodes (a long
// list collapses); and the Rerun failures / Rerun errors buttons, which queue a retry of the
// run (POST /retry/<id>) and open the new run's page.

import { API, api, enc, episodeHref, runApi, runHref } from "./api.js";
import { dataTable, h, notice, num, panel, put, rowHead, scroller } from "./dom.js";
import { firstLine, splitList } from "./failure_words.js";
import { ACTIVE } from "./run_facts.js";

const SHOWN_EPISODES = 12;

function episodeLinks(runId, indices) {
  const link = (i) => h("a", { href: episodeHref(runId, i), text: String(i), dataset: { episode: i } });
  const { head, rest } = splitList(indices, SHOWN_EPISODES);
  const joined = (list) => list.flatMap((i, k) => (k ? [", ", link(i)] : [link(i)]));
  return h("span", { class: "episode-links" }, joined(head),
    rest.length ? h("details", { class: "more-episodes" },
      h("summary", {}, `+${rest.length} more`), joined(rest)) : null);
}

function groupsTable(runId, groups) {
  return dataTable("failures-table", ["Episodes", "What", "Tasks", "Example", "Which"],
    groups.map((g) => h("tr", { dataset: { kind: g.kind, count: String(g.count) } },
      num(g.count),
      rowHead(h("span", { class: "failure-kind", title: g.meaning }, g.label)),
      h("td", {}, g.tasks.join(", ")),
      h("td", { class: "error-text", title: g.example }, firstLine(g.example)),
      h("td", {}, episodeLinks(runId, g.episodes)))), [0]);
}

// One button per selection the server says has episodes; each opens the new run once queued.
function rerunButtons(runId, report, message) {
  const button = (select, text, count) => {
    const el = h("button", { type: "button", class: `action rerun-${select}`, dataset: { select },
      title: `a new run of these ${count} episode(s), with the same seeds, linked to this one` },
    `${text} (${count})`);
    el.addEventListener("click", async () => {
      el.disabled = true;
      try {
        const started = await api(`${API}/retry/${enc(runId)}`, { method: "POST", body: { select } });
        location.hash = runHref(started.run_id);
      } catch (err) {
        el.disabled = false;
        put(message, notice(`Could not rerun: ${err.message}`, "error"));
      }
    });
    return el;
  };
  return [
    report.retryable_failures ? button("failures", "Rerun failures", report.retryable_failures) : null,
    report.errors ? button("errors", "Rerun errors", report.errors) : null,
  ];
}

// The panel, hidden while nothing failed; `load(summary)` fetches the groups again.
export function failuresPanel(ctx, runId) {
  const section = panel("Failures", "failures-panel");
  const actions = h("span", { class: "actions" });
  const message = h("div", { class: "form-message" });
  section.el.hidden = true;
  section.heading.after(h("div", { class: "toolbar" }, actions), message);
  async function load(summary) {
    const report = await api(`${runApi(runId)}/failures`);
    if (!ctx.alive) return;
    section.el.hidden = !report.failed;
    section.heading.textContent = `Failures (${report.failed} of ${report.episodes} episodes)`;
    section.el.dataset.failed = String(report.failed);
    // A retry picks from the records: while the run goes, they are not all there yet.
    put(actions, ACTIVE.has(summary.status) ? null : rerunButtons(runId, report, message));
    put(section.body, report.failed ? scroller(groupsTable(runId, report.groups)) : null,
      h("p", { class: "muted" }, "Grouped by cause (numbers and ids in messages set aside); "
        + "an episode's page shows its traceback."));
  }
  return {
    el: section.el,
    load: (summary) => load(summary).catch((err) => {
      section.el.hidden = false;
      ctx.fail(section.body, err);
    }),
  };
}
