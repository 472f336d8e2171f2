// Element helpers: build HTML and SVG with properties, never parse server data as HTML.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  el.append(...nodes(children));
  return el;
}

function nodes(children) {
  return children.flat(Infinity)
    .filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c))));
}

// replaceChildren that skips null / false (optional parts of a view).
export function put(el, ...children) {
  el.replaceChildren(...nodes(children));
}

function setProps(el, props) {
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (typeof value !== "string" && key in el) el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) el.setAttribute(key, value);
  }
  el.append(...nodes(children));
  return el;
}

export function panel(title, id) {
  const body = h("div", { class: "panel-body" });
  const heading = h("h2", {}, title);
  return { el: h("section", { class: "panel", id }, heading, body), body, heading };
}

export function notice(text, kind = "info") {
  return h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : undefined }, text);
}

export function keyValues(entries) {
  return h("table", { class: "kv" }, h("tbody", {}, entries.map(([k, v]) =>
    h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v)))));
}

function emptyRow(colspan, text) {
  return h("tr", { class: "empty" }, h("td", { colspan }, text));
}

export const option = (value, text = value) => h("option", { value, text });
export const num = (content) => h("td", { class: "num" }, content);
export const rowHead = (content) => h("th", { scope: "row" }, content);

// `numeric` lists the column indices whose headers align right, over right-aligned numbers.
export function headRow(labels, numeric = []) {
  return h("thead", {}, h("tr", {}, labels.map((label, i) =>
    h("th", { scope: "col", class: numeric.includes(i) ? "num" : undefined }, label))));
}

export function dataTable(id, labels, rows, numeric = []) {
  return h("table", { class: "data", id }, headRow(labels, numeric), h("tbody", {}, rows));
}

export function scroller(...children) {
  return h("div", { class: "table-wrap" }, children);
}

export function fillRows(tbody, rows, width, emptyText) {
  tbody.replaceChildren(...(rows.length ? rows : [emptyRow(width, emptyText)]));
}

export function statusBadge(status) {
  return h("span", { class: `badge st-${status || "unknown"}`, text: status || "unknown" });
}
