// Which assets mean an episode has frames (both layouts), and the server's frame listing as the
// player's views.
import assert from "node:assert/strict";
import { test } from "node:test";

globalThis.location ??= new URL("http://127.0.0.1:8000/"); // api.js reads its token
const { framesByView } = await import("../../src/agentcanvas/api/web/js/frame_player.js");
const { hasFrameAssets } = await import("../../src/agentcanvas/api/web/js/episode_video.js");

test("a recorded view or an older run's PNG frames count as frames; a partial video does not", () => {
  assert.equal(hasFrameAssets(["env.mp4"]), true);
  assert.equal(hasFrameAssets(["step0000_env.png", "step0001_env.png"]), true);
  assert.equal(hasFrameAssets([".env.partial.mp4"]), false);
  assert.equal(hasFrameAssets(["frame.png", "notes.txt"]), false);
  assert.equal(hasFrameAssets([]), false);
  assert.equal(hasFrameAssets(undefined), false);
});

test("the listing becomes each view's frames in order, with their steps and positions", () => {
  const views = framesByView({
    main: "env",
    views: [
      { view: "env", steps: [0, 1, 2, 5] },
      { view: "wrist", steps: [] },
    ],
  });
  assert.deepEqual([...views.keys()], ["env"]); // a view without frames is left out
  assert.deepEqual(views.get("env"), [
    { step: 0, position: 0 }, { step: 1, position: 1 }, { step: 2, position: 2 },
    { step: 5, position: 3 },
  ]);
  assert.equal(framesByView(null).size, 0);
});
