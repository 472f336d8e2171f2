// What a page's URL holds, so that a link reproduces the view and Back restores it: the runs
// list's filters (#/?q=&tag=&graph=&status=&offset=) and the compare page's runs
// (#/compare?runs=&a=&b=). Pure: tested by Node (tests/js).

// Filter → its query parameter, the same names as GET /api/eval/v2/runs takes.
const RUN_FILTER_PARAMS = [["text", "q"], ["tag", "tag"], ["graph", "graph"], ["status", "status"]];

// The runs list's filters read from a hash query (URLSearchParams); absent ones empty.
export function runsFilters(params) {
  const filters = Object.fromEntries(RUN_FILTER_PARAMS.map(([key, param]) =>
    [key, (params.get(param) ?? "").trim()]));
  const offset = Number(params.get("offset"));
  filters.offset = Number.isInteger(offset) && offset > 0 ? offset : 0;
  return filters;
}

// The filters as query parameters, the empty ones left out (offset 0 too).
function filterParams(filters) {
  const params = new URLSearchParams();
  for (const [key, param] of RUN_FILTER_PARAMS) {
    if (filters[key]) params.set(param, filters[key]);
  }
  return params;
}

// The hash of the runs list showing `filters`: "#/" when none is set.
export function runsHash(filters) {
  const params = filterParams(filters);
  if (filters.offset > 0) params.set("offset", String(filters.offset));
  const query = params.toString();
  return query ? `#/?${query}` : "#/";
}

// The listing request of `filters`: one page of `limit` runs from their offset.
export function runsApiQuery(filters, limit) {
  const params = new URLSearchParams({ offset: String(filters.offset ?? 0), limit: String(limit) });
  filterParams(filters).forEach((value, key) => params.set(key, value));
  return params;
}

// Whether any filter narrows the list (the page offset aside).
export const isFiltered = (filters) => RUN_FILTER_PARAMS.some(([key]) => Boolean(filters[key]));

const enc = encodeURIComponent;

// #/compare?runs=A,B,C&a=A&b=B: a leaderboard of `runs` and the paired view of `a` and `b`.
export function compareHref({ runs = [], a = "", b = "" }) {
  const parts = [];
  if (runs.length) parts.push(`runs=${runs.map(enc).join(",")}`);
  if (a) parts.push(`a=${enc(a)}`);
  if (b) parts.push(`b=${enc(b)}`);
  return `#/compare${parts.length ? `?${parts.join("&")}` : ""}`;
}
