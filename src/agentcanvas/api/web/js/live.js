// Live events over the WebSocket /ws (reconnects with backoff), fanned out to subscribers.

import { parseJson, withToken } from "./api.js";

export const POLL_MS = 5000; // fallback only; progress is pushed over the WebSocket

const live = { socket: null, handlers: new Set(), retryMs: 500, opens: 0 };

export function connectLive() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(withToken(`${scheme}//${location.host}/ws`));
  live.socket = socket;
  socket.onopen = () => {
    live.retryMs = 500;
    live.opens += 1;
    setLiveState("live");
    dispatch({ type: "live_open", reconnect: live.opens > 1 });
  };
  socket.onmessage = (event) => {
    const message = parseJson(event.data);
    if (message) dispatch(message);
  };
  socket.onclose = () => {
    setLiveState("offline");
    setTimeout(connectLive, live.retryMs);
    live.retryMs = Math.min(live.retryMs * 2, 10000);
  };
}

// Calls `handler` with every event; returns the function that unsubscribes it.
export function subscribe(handler) {
  live.handlers.add(handler);
  return () => live.handlers.delete(handler);
}

export function isLive() {
  return live.socket?.readyState === WebSocket.OPEN;
}

function dispatch(message) {
  for (const handler of live.handlers) {
    try {
      handler(message);
    } catch (err) {
      console.error("live handler failed", err);
    }
  }
}

function setLiveState(state) {
  const el = document.getElementById("live-status");
  el.dataset.state = state;
  el.textContent = state === "live" ? "● live" : "○ offline · polling";
}

// The latest compact summary an event carries (subprocess relay: `summary`; in-process: fields).
export function eventSummary(message, previous) {
  if (message.summary) return message.summary;
  if (message.type !== "eval_progress") return null;
  const merged = { ...(previous || {}), run_id: message.run_id, status: "running" };
  for (const key of ["episodes_done", "episodes_total", "success_rate"]) {
    if (key in message) merged[key] = message[key];
  }
  // The server's error count so far, under its verdict (still in_progress while it runs).
  if (Number.isInteger(message.error_count) && previous?.health) {
    merged.health = { ...previous.health, error_count: message.error_count };
  }
  // The success rate's anytime-valid sequence so far (its method and confidence are the
  // summary's; the prefix and success counts the event leaves out are dropped, not kept stale).
  if (Array.isArray(message.success_cs) && message.success_cs.length === 2) {
    const [lo, hi] = message.success_cs;
    const { method, confidence } = previous?.live_interval ?? {};
    merged.live_interval = { lo, hi, n: message.success_cs_n, method, confidence };
  }
  return merged;
}
