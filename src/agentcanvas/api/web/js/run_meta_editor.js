// A run's name, tags and note on its page, and the form that edits them (PATCH …/meta).

import { api, runApi } from "./api.js";
import { h, notice, put } from "./dom.js";
import { tagChip } from "./run_rows.js";
import { splitTags, tagsProblem } from "./form_checks.js";

function field(label, input) {
  return h("label", { class: "field" }, h("span", {}, label), input);
}

function editorForm(meta, onSave, onCancel) {
  const name = h("input", { type: "text", id: "meta-name", value: meta.name ?? "", maxlength: 120 });
  const tags = h("input", { type: "text", id: "meta-tags", value: (meta.tags ?? []).join(", "),
    placeholder: "comma-separated" });
  const note = h("textarea", { id: "meta-note", rows: 2, maxlength: 4000 });
  note.value = meta.note ?? "";
  const message = h("div", { class: "form-message", id: "meta-message" });
  const save = h("button", { type: "submit", class: "primary", text: "Save" });
  const cancel = h("button", { type: "button", text: "Cancel", onclick: onCancel });
  const form = h("form", { id: "meta-form", class: "meta-form", novalidate: true },
    h("div", { class: "fields" }, field("Name", name), field("Tags", tags), field("Note", note)),
    h("div", { class: "form-actions" }, save, cancel, message));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const problem = tagsProblem(tags.value);
    if (problem) {
      put(message, notice(`tags: ${problem}`, "error"));
      return;
    }
    const body = { name: name.value.trim() || null, tags: [...new Set(splitTags(tags.value))],
      note: note.value.trim() || null };
    save.disabled = true;
    try {
      await onSave(body);
    } catch (err) {
      put(message, notice(err.message, "error"));
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

// The block under the run's title: name, tags, note, and an "Edit" button.
export function runMetaBlock(ctx, runId, onChange) {
  const el = h("div", { class: "run-meta", id: "run-meta" });
  let meta = { name: null, tags: [], note: null };
  const show = () => {
    const edit = h("button", { type: "button", id: "meta-edit", class: "link", text: "edit name, tags, note",
      onclick: () => put(el, editorForm(meta, save, show)) });
    put(el,
      meta.tags.length ? h("span", { class: "tags" }, meta.tags.map((t) => tagChip(t))) : null,
      meta.note ? h("p", { class: "note", id: "run-note" }, meta.note) : null,
      edit);
  };
  const save = async (body) => {
    meta = await api(`${runApi(runId)}/meta`, { method: "PATCH", body });
    onChange(meta);
    show();
  };
  return {
    el,
    async load() {
      meta = await api(`${runApi(runId)}/meta`);
      if (!ctx.alive) return;
      onChange(meta);
      show();
    },
  };
}
