// Views own their timers and subscriptions; the router disposes the old view.

import { notice } from "./dom.js";
import { subscribe } from "./live.js";

function throttle(fn, ms) {
  let timer = null;
  let queued = false;
  const run = () => {
    if (timer !== null) {
      queued = true;
      return;
    }
    fn();
    timer = setTimeout(() => {
      timer = null;
      if (queued) {
        queued = false;
        run();
      }
    }, ms);
  };
  run.cancel = () => {
    clearTimeout(timer);
    timer = null;
    queued = false;
  };
  return run;
}

export function viewContext(root) {
  const disposers = [];
  return {
    root,
    alive: true,
    onDispose(fn) { disposers.push(fn); },
    every(ms, fn) {
      const id = setInterval(fn, ms);
      disposers.push(() => clearInterval(id));
    },
    listen(fn) {
      disposers.push(subscribe(fn));
    },
    throttle(fn, ms) {
      const run = throttle(fn, ms);
      disposers.push(run.cancel);
      return run;
    },
    fail(container, err) {
      if (!this.alive) return;
      console.error(err);
      container.replaceChildren(notice(err.message || String(err), "error"));
    },
    dispose() {
      this.alive = false;
      disposers.splice(0).forEach((fn) => fn());
    },
  };
}
