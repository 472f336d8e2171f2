// A pager bar (first, previous, next, last) over a list paged by offset.

import { h } from "./dom.js";
import { clamp } from "./format.js";

export const PAGE_SIZE = 50;

export function pagerBar(onOffset, pageSize = PAGE_SIZE) {
  const state = { offset: 0, total: 0 };
  const go = (offset) => onOffset(clamp(offset, 0, Math.max(0, lastOffset())));
  const lastOffset = () => Math.floor((state.total - 1) / pageSize) * pageSize;
  const button = (text, label, fn) => h("button", { type: "button", text, "aria-label": label, onclick: fn });
  const first = button("«", "first page", () => go(0));
  const prev = button("‹ Prev", "previous page", () => go(state.offset - pageSize));
  const next = button("Next ›", "next page", () => go(state.offset + pageSize));
  const last = button("»", "last page", () => go(lastOffset()));
  const info = h("span", { class: "pager-info" });
  return {
    el: h("div", { class: "pager" }, first, prev, info, next, last),
    update(offset, count, total) {
      Object.assign(state, { offset, total });
      const page = Math.floor(offset / pageSize) + 1;
      const pages = Math.max(1, Math.ceil(total / pageSize));
      info.textContent = total
        ? `${offset + 1}–${offset + count} of ${total} · page ${page}/${pages}` : "none";
      first.disabled = prev.disabled = offset <= 0;
      next.disabled = last.disabled = offset + count >= total;
    },
  };
}
