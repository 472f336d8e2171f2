// The "Start a run" form: fields, client-side checks, and the server's 422 placed per field.

import { API, api, runHref } from "./api.js";
import { h, notice, option, panel } from "./dom.js";

const FORM_FIELDS = [
  { name: "graph_name", label: "Graph", kind: "select" },
  { name: "episode_count", label: "Episodes per task", kind: "int", value: "10", min: 1 },
  { name: "worker_count", label: "Workers", kind: "int", value: "1", min: 1 },
  { name: "step_budget", label: "Step budget", kind: "int", optional: true, min: 1,
    placeholder: "graph default" },
  { name: "seed", label: "Seed", kind: "int", value: "0", min: 0 },
  { name: "tasks", label: "Tasks", kind: "text", optional: true,
    placeholder: "graph's tasks (comma-separated)" },
  { name: "name", label: "Name", kind: "text", optional: true, placeholder: "optional" },
  { name: "tags", label: "Tags", kind: "text", optional: true, placeholder: "comma-separated" },
  { name: "note", label: "Note", kind: "text", optional: true, placeholder: "optional" },
  { name: "save_frames", label: "Save frames", kind: "bool" },
];
const TAG = /^[A-Za-z0-9][A-Za-z0-9_.:+=-]{0,39}$/;

// "a, b" → ["a", "b"]; shared by the start form and the run page's editor.
export function splitTags(text) {
  return text.split(",").map((t) => t.trim()).filter(Boolean);
}

export function tagsProblem(text) {
  const bad = splitTags(text).find((t) => !TAG.test(t));
  return bad === undefined ? null
    : `tag ${JSON.stringify(bad)}: letters, digits and _.:+=- only, at most 40 characters`;
}

function formField(field) {
  const id = `f-${field.name}`;
  const error = h("small", { class: "field-error", id: `${id}-error`, "data-error-for": field.name });
  const described = { id, name: field.name, "aria-describedby": error.id };
  if (field.kind === "bool") {
    const box = h("input", { ...described, type: "checkbox" });
    return h("label", { class: "field check" }, box, field.label, error);
  }
  const input = field.kind === "select"
    ? h("select", described, option("", "loading…"))
    : h("input", { ...described, type: field.kind === "int" ? "number" : "text", value: field.value,
      placeholder: field.placeholder, inputmode: field.kind === "int" ? "numeric" : undefined });
  return h("label", { class: "field", for: id }, h("span", {}, field.label), input, error);
}

// Client-side checks cover syntax only; limits (e.g. workers ≤ 64) come from the server's 422.
function checkField(field, raw) {
  const text = String(raw ?? "").trim();
  if (field.kind === "select" && !text) return "pick a graph";
  if (field.kind === "int") {
    if (!text) return field.optional ? null : "required";
    if (!/^-?\d+$/.test(text)) return "must be a whole number";
    if (Number(text) < field.min) return `must be at least ${field.min}`;
  }
  if (field.name === "tasks" && text && text.split(",").some((t) => !t.trim())) {
    return "comma-separated task ids, none empty";
  }
  return field.name === "tags" ? tagsProblem(text) : null;
}

function formBody(form) {
  const value = (name) => form.elements[name].value.trim();
  const body = {
    graph_name: value("graph_name"),
    episode_count: Number(value("episode_count")),
    worker_count: Number(value("worker_count")),
    seed: Number(value("seed")),
    save_frames: form.elements.save_frames.checked,
  };
  if (value("step_budget")) body.step_budget = Number(value("step_budget"));
  if (value("tasks")) body.tasks = value("tasks").split(",").map((t) => t.trim());
  if (value("name")) body.name = value("name");
  if (splitTags(value("tags")).length) body.tags = [...new Set(splitTags(value("tags")))];
  if (value("note")) body.note = value("note");
  return body;
}

function setFieldError(form, name, message) {
  const slot = form.querySelector(`[data-error-for="${name}"]`);
  if (!slot) return false;
  slot.textContent = message || "";
  form.elements[name]?.setAttribute("aria-invalid", message ? "true" : "false");
  return true;
}

function showServerErrors(form, err, message) {
  const problems = err.body?.problems ?? [];
  const unplaced = problems.filter((p) => !setFieldError(form, String(p.field).split(".")[0], p.message));
  const detail = typeof err.body?.detail === "string" ? err.body.detail : "";
  const prefixed = /^(\w+): (.+)$/s.exec(detail);
  if (!problems.length && prefixed && setFieldError(form, prefixed[1], prefixed[2])) return;
  if (!problems.length || unplaced.length) {
    const text = unplaced.length ? unplaced.map((p) => `${p.field}: ${p.message}`).join("; ") : err.message;
    message.replaceChildren(notice(text, "error"));
  }
}

async function loadGraphs(select) {
  const data = await api("/api/graphs");
  select.replaceChildren(...data.graphs.map((g) =>
    option(g.name, g.origin === "builtin" ? g.name : `${g.name} (${g.origin})`)));
  if (!data.graphs.length) select.append(option("", "no graphs"));
}

export function startForm(ctx, onStarted) {
  const message = h("div", { class: "form-message", id: "start-message" });
  const submit = h("button", { type: "submit", class: "primary", text: "Queue run" });
  const form = h("form", { id: "start-form", novalidate: true },
    h("div", { class: "fields" }, FORM_FIELDS.map(formField)),
    h("div", { class: "form-actions" }, submit, message));
  const { el, body } = panel("Start a run", "start-panel");
  body.append(form);
  loadGraphs(form.elements.graph_name).catch((err) => ctx.fail(message, err));
  form.addEventListener("input", (event) => setFieldError(form, event.target.name, ""));
  form.addEventListener("change", (event) => {
    const field = FORM_FIELDS.find((f) => f.name === event.target.name);
    if (field && field.kind !== "bool") {
      setFieldError(form, field.name, checkField(field, event.target.value));
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.replaceChildren();
    const problems = FORM_FIELDS.filter((f) => f.kind !== "bool")
      .map((f) => [f.name, checkField(f, form.elements[f.name].value)]);
    problems.forEach(([name, problem]) => setFieldError(form, name, problem));
    const firstBad = problems.find(([, problem]) => problem);
    if (firstBad) {
      form.elements[firstBad[0]].focus();
      return;
    }
    submit.disabled = true;
    try {
      const started = await api(`${API}/start`, { method: "POST", body: formBody(form) });
      message.replaceChildren(h("span", { class: "ok", dataset: { runId: started.run_id } },
        "Queued ", h("a", { href: runHref(started.run_id), text: started.run_id })));
      onStarted(started);
    } catch (err) {
      showServerErrors(form, err, message);
    } finally {
      submit.disabled = false;
    }
  });
  return el;
}
