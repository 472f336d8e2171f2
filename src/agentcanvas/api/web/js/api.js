// The HTTP client of the eval API: JSON requests with the page's token, and the app's URLs.

export const API = "/api/eval/v2";
const TOKEN = new URLSearchParams(location.search).get("token");

class ApiError extends Error {
  constructor(status, body) {
    const detail = body && typeof body === "object" ? body.detail : body;
    super(`${status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    this.status = status;
    this.body = body;
  }
}

export function withToken(url) {
  if (!TOKEN) return url;
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(TOKEN)}`;
}

export function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(withToken(path), init);
  const text = await response.text();
  const data = text ? parseJson(text) ?? text : null;
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// A GET whose calls supersede each other: an answer that arrives after a newer call (say, a
// click on "next" then on "sort") is dropped, and so is one for a view already left.
export function latestGet(ctx) {
  let ticket = 0;
  return async (path) => {
    const mine = ++ticket;
    const data = await api(path);
    return ctx.alive && mine === ticket ? data : null;
  };
}

export const enc = encodeURIComponent;
export const runHref = (id) => `#/run/${enc(id)}`;
export const episodeHref = (id, index) => `#/run/${enc(id)}/episode/${index}`;
export const runApi = (id) => `${API}/runs/${enc(id)}`;
