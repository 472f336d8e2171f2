// The start form's fields, their syntax checks and the request body they make; tag checks
// shared with the run page's editor. Limits (workers ≤ 64, …) stay the server's: its 422 is
// placed beside the field. Pure: tested by Node (tests/js).

export const FORM_FIELDS = [
  { name: "graph_name", label: "Graph", kind: "select" },
  { name: "episode_count", label: "Episodes per task", kind: "int", value: "10", min: 1 },
  { name: "worker_count", label: "Workers", kind: "int", value: "1", min: 1 },
  { name: "step_budget", label: "Step budget", kind: "int", optional: true, min: 1,
    placeholder: "graph default" },
  { name: "seed", label: "Seed", kind: "int", value: "0", min: 0 },
  { name: "priority", label: "Priority", kind: "int", value: "0", min: -100, max: 100,
    title: "higher runs first (-100 to 100); equal priorities in the order queued" },
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

// What is wrong with `raw` for `field` (syntax only), or null.
export function checkField(field, raw) {
  const text = String(raw ?? "").trim();
  if (field.kind === "select" && !text) return "pick a graph";
  if (field.kind === "int") {
    if (!text) return field.optional ? null : "required";
    if (!/^-?\d+$/.test(text)) return "must be a whole number";
    if (Number(text) < field.min) return `must be at least ${field.min}`;
    if (field.max !== undefined && Number(text) > field.max) return `must be at most ${field.max}`;
  }
  if (field.name === "tasks" && text && text.split(",").some((t) => !t.trim())) {
    return "comma-separated task ids, none empty";
  }
  return field.name === "tags" ? tagsProblem(text) : null;
}

// The POST /start body of the form's values ({name: text, save_frames: boolean}); optional
// fields left empty are left out, so the server's defaults apply.
export function startBody(values) {
  const value = (name) => String(values[name] ?? "").trim();
  const body = {
    graph_name: value("graph_name"),
    episode_count: Number(value("episode_count")),
    worker_count: Number(value("worker_count")),
    seed: Number(value("seed")),
    save_frames: Boolean(values.save_frames),
  };
  if (value("priority")) body.priority = Number(value("priority"));
  if (value("step_budget")) body.step_budget = Number(value("step_budget"));
  if (value("tasks")) body.tasks = value("tasks").split(",").map((t) => t.trim());
  if (value("name")) body.name = value("name");
  if (splitTags(value("tags")).length) body.tags = [...new Set(splitTags(value("tags")))];
  if (value("note")) body.note = value("note");
  return body;
}
