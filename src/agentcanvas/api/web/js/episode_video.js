// An episode's video: a <video> with its controls under it and a link to download. The server
// recorded it while the episode ran (an older run's is made from its PNG frames on first
// request); when there is none, the server's reason is shown instead.

import { runApi, withToken } from "./api.js";
import { h, notice, option } from "./dom.js";

export const videoUrl = (runId, index, download = false) => withToken(
  `${runApi(runId)}/episodes/${index}/video.mp4${download ? "?download=true" : ""}`);

// Why a video did not load: the server's JSON detail (404 no frames, 409 not ended).
async function videoProblem(url) {
  try {
    const response = await fetch(url);
    if (response.ok) return "the browser could not play this video";
    const body = await response.json().catch(() => null);
    return `${response.status}: ${body?.detail ?? response.statusText}`;
  } catch (err) {
    return String(err);
  }
}

const SPEEDS = [0.25, 0.5, 1, 2];

function timeText(seconds) {
  return Number.isFinite(seconds) ? `${seconds.toFixed(1)} s` : "–";
}

// Play/pause, a position slider, the time and the speed, under the video rather than over it:
// native controls would cover the caption strip at the bottom of each frame.
function videoControls(video) {
  const play = h("button", { type: "button", class: "video-play", text: "▶ Play" });
  const seek = h("input", { type: "range", class: "video-seek", min: 0, max: 1000, value: 0,
    "aria-label": "position in the video" });
  const time = h("span", { class: "video-time" }, "–");
  const speed = h("select", { class: "video-speed", "aria-label": "playback speed" },
    SPEEDS.map((x) => option(String(x), `${x}×`)));
  speed.value = "1";
  const toggle = () => (video.paused || video.ended ? video.play().catch(() => {}) : video.pause());
  play.addEventListener("click", toggle);
  video.addEventListener("click", toggle);
  const showState = () => { play.textContent = video.paused || video.ended ? "▶ Play" : "❚❚ Pause"; };
  ["play", "pause", "ended"].forEach((type) => video.addEventListener(type, showState));
  const showTime = () => {
    const { currentTime, duration } = video;
    if (Number.isFinite(duration) && duration > 0) seek.value = String(Math.round(1000 * currentTime / duration));
    time.textContent = `${timeText(currentTime)} / ${timeText(duration)}`;
  };
  ["timeupdate", "loadedmetadata", "seeked"].forEach((type) => video.addEventListener(type, showTime));
  seek.addEventListener("input", () => {
    if (Number.isFinite(video.duration)) video.currentTime = (Number(seek.value) / 1000) * video.duration;
  });
  speed.addEventListener("change", () => { video.playbackRate = Number(speed.value); });
  return h("div", { class: "video-controls" }, play, seek, time, speed);
}

// The video and its controls under it; `onProblem(text)` says why it could not load.
export function videoPlayer(runId, index, { id, onProblem } = {}) {
  const url = videoUrl(runId, index);
  const video = h("video", { id, class: "episode-video", muted: true, preload: "metadata",
    playsInline: true, src: url });
  video.addEventListener("error", () => {
    videoProblem(url).then((text) => onProblem?.(text));
  });
  return { el: h("div", { class: "video-player" }, video, videoControls(video)), video };
}

export function episodeVideo(runId, index, hasFrames) {
  if (!hasFrames) {
    return notice("No video: this episode kept no frames (runs keep them with --save-frames or "
      + "--frames every|failures; under failures a successful episode keeps none).");
  }
  const box = h("div", { class: "video-box", id: "episode-video-box" });
  const player = videoPlayer(runId, index, {
    id: "episode-video",
    onProblem: (text) => box.replaceChildren(notice(`No video: ${text}`, "error")),
  });
  const download = h("a", { href: videoUrl(runId, index, true), id: "video-download",
    class: "download", download: `${runId}_ep${String(index).padStart(4, "0")}.mp4`,
    text: "download video (mp4)" });
  box.append(player.el, h("div", { class: "video-links" }, download));
  return box;
}

// Frames in either layout: a recorded view (<view>.mp4) or an older run's PNG frames.
export const hasFrameAssets = (assets) => (assets ?? []).some(
  (a) => /^step\d+_.+\.png$/i.test(a) || /^[^.].*\.mp4$/i.test(a));
