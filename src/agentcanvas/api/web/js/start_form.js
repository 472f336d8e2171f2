// The "Start a run" form: its fields (form_checks.js), client-side checks, and the server's
// 422 placed per field.

import { API, api, runHref } from "./api.js";
import { h, notice, option, panel } from "./dom.js";
import { checkField, FORM_FIELDS, startBody } from "./form_checks.js";

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
      placeholder: field.placeholder, inputmode: field.kind === "int" ? "numeric" : undefined,
      min: field.min, max: field.max });
  return h("label", { class: "field", for: id, title: field.title },
    h("span", {}, field.label), input, error);
}

// The form's values by field name: text trimmed later, the checkbox as a boolean.
function formValues(form) {
  return Object.fromEntries(FORM_FIELDS.map((f) => [f.name,
    f.kind === "bool" ? form.elements[f.name].checked : form.elements[f.name].value]));
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
      const started = await api(`${API}/start`, { method: "POST", body: startBody(formValues(form)) });
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
