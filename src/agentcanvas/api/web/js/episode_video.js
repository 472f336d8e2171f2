// An episode's video: a <video> to play and a link to download, made by the server from the
// saved frames on first request; when there is none, the server's reason is shown instead.

import { runApi, withToken } from "./api.js";
import { h, notice } from "./dom.js";

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

export function videoElement(runId, index, { id, onProblem } = {}) {
  const url = videoUrl(runId, index);
  const video = h("video", { id, class: "episode-video", controls: true, muted: true,
    preload: "metadata", playsInline: true, src: url });
  video.addEventListener("error", () => {
    videoProblem(url).then((text) => onProblem?.(text));
  });
  return video;
}

export function episodeVideo(runId, index, hasFrames) {
  if (!hasFrames) {
    return notice("No video: this episode kept no frames (runs keep them with --save-frames or "
      + "--frames every|failures; under failures a successful episode keeps none).");
  }
  const box = h("div", { class: "video-box", id: "episode-video-box" });
  const video = videoElement(runId, index, {
    id: "episode-video",
    onProblem: (text) => box.replaceChildren(notice(`No video: ${text}`, "error")),
  });
  const download = h("a", { href: videoUrl(runId, index, true), id: "video-download",
    class: "download", download: `${runId}_ep${String(index).padStart(4, "0")}.mp4`,
    text: "download video (mp4)" });
  box.append(video, h("div", { class: "video-links" }, download));
  return box;
}

export const hasFrameAssets = (assets) => (assets ?? []).some((a) => /^step\d+_.+\.png$/i.test(a));
