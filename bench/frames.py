"""What frames cost, before and after they were recorded as video: bytes, run time, first byte.

    .venv/bin/python bench/frames.py [--quick] [--cartpole N] [--babyai N] [--workers W]
                                     [--before REF]

"Before" is the code at ``REF`` (default: the commit before frames became video, found in
git), run from a ``git archive`` of its ``src``; "after" is this tree. Both run the same
episodes in the same invocation, interleaved, each in its own process and workspace:

- ``cartpole_mlp`` (N episodes, default 20) and ``babyai_oracle`` (N per task, step budget
  8 so that some fail), each with frames ``none`` and ``every``; the wall time of each run
  (the summary's start to finish) and its ratio to ``none``;
- the bytes of the frames on disk (every file under the episodes' ``assets/``, and a
  ``video.mp4`` cached beside them): apparent size and allocated blocks, per frame and per
  episode, and the ratio after / before (the goal is at most 0.25);
- the time to the first byte of an episode's video from a real ``agentcanvas serve`` (the
  first request of three episodes), and of the frame scrubber's frames: the first one asked
  for (the middle of the episode), then the next few (before: PNG assets; after: the
  frames route, decoded from the video);
- that the records of every run are identical (frames are never part of a record).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
ANNOUNCE = re.compile(r"agentcanvas backend on (http://\S+)")
STEP_BUDGET_BABYAI = 8
SERVE_DEADLINE_S = 60.0
VIDEOS_TIMED = 3
FRAMES_STEPPED = 4  # frames fetched after the first, as a user stepping through


def _worker(graph: str, n: int, workers: int, mode: str, budget: int | None) -> None:
    """In the process of one side: one foreground run; prints its run folder."""
    import asyncio

    from agentcanvas.eval.config import EvalConfig
    from agentcanvas.eval.foreground import run_foreground
    from agentcanvas.server.registry import WorkspaceComponentRegistry

    registry = WorkspaceComponentRegistry(workspace=Path.cwd())
    registry.scan_all()
    config = EvalConfig(
        graph_name=graph,
        episode_count=n,
        worker_count=workers,
        step_budget=budget,
        frames=mode,  # type: ignore[arg-type]
    )
    run = asyncio.run(run_foreground(registry, registry.load_graph(graph), config))
    print(json.dumps({"run_dir": str(run.run_dir.root)}))


def _side_src(ref: str, into: Path) -> Path:
    """``src`` of ``ref`` extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    ).stdout
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as files:
        files.extractall(into, filter="data")
    return into / "src"


def _before_ref() -> str:
    """The parent of the commit that added the video recorder (HEAD when it is not committed)."""
    added = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H", "--",
         "src/agentcanvas/nodes/frame_video.py"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return f"{added[-1]}^" if added else "HEAD"


def _env(src: Path, workspace: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "AGENTCANVAS_HOME": str(workspace),
            "HF_HUB_OFFLINE": "1"}  # fmt: skip


def _run(src: Path, workspace: Path, args: list[str]) -> Path:
    done = subprocess.run(
        [PYTHON, __file__, "--worker", *args],
        cwd=workspace, env=_env(src, workspace), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"run {args} failed:\n{done.stderr[-3000:]}")
    return Path(json.loads(done.stdout.strip().splitlines()[-1])["run_dir"])


def _frames_on_disk(run_dir: Path) -> dict[str, int]:
    """Bytes of every frame file of the run (apparent, allocated), frames, episodes."""
    from agentcanvas.eval.media import frame_views

    apparent = allocated = n_frames = 0
    episodes = sorted((run_dir / "episodes").iterdir())
    for episode in episodes:
        files = [*(episode / "assets").glob("*"), *episode.glob("video.mp4")]
        for path in files:
            stat = path.stat()
            apparent += stat.st_size
            allocated += stat.st_blocks * 512
        views = frame_views(episode / "assets")  # either layout: PNGs, or a video's index
        n_frames += sum(len(view.steps) for view in views.values())
    return {"apparent": apparent, "allocated": allocated, "frames": n_frames,
            "episodes": len(episodes)}  # fmt: skip


def _summary(run_dir: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return summary


def _wall_s(run_dir: Path) -> float:
    timings = _summary(run_dir)["timings"]
    return float(timings["finished_at"] - timings["started_at"])


def _first_byte_s(client: httpx.Client, url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with client.stream("GET", url) as response:
        if response.status_code != 200:
            raise SystemExit(f"{url}: {response.status_code} {response.read()[:300]!r}")
        chunks = response.iter_raw()
        first = next(chunks)
        spent = time.perf_counter() - started
        size = len(first) + sum(len(chunk) for chunk in chunks)
    return spent, size


def _serve_times(src: Path, workspace: Path, run_dir: Path, frames: bool) -> dict[str, Any]:
    """First-byte times of the first request of a few episodes' videos (and frames)."""
    log = workspace / "serve.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [PYTHON, "-m", "agentcanvas", "serve", "--port", "0"], cwd=workspace,
            env=_env(src, workspace), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        url = _announced(proc, log)
        base = f"{url}/api/eval/v2/runs/{run_dir.name}/episodes"
        times: dict[str, Any] = {"video_s": [], "video_bytes": [], "frame_s": [], "next_s": []}
        with httpx.Client(timeout=120) as client:
            for index in range(VIDEOS_TIMED):
                spent, size = _first_byte_s(client, f"{base}/{index}/video.mp4")
                times["video_s"].append(spent)
                times["video_bytes"].append(size)
                urls = _frame_urls(client, f"{base}/{index}", frames)
                middle = len(urls) // 2  # the first frame asked for, then the next few
                times["frame_s"].append(_first_byte_s(client, urls[middle])[0])
                for url in urls[middle + 1 : middle + 1 + FRAMES_STEPPED]:
                    times["next_s"].append(_first_byte_s(client, url)[0])
        return times
    finally:
        proc.terminate()
        proc.wait(30)


def _frame_urls(client: httpx.Client, episode: str, frames_route: bool) -> list[str]:
    """The URLs the frame scrubber fetches the env's frames from, in order: the frames
    route (after), or each PNG asset (before)."""
    if frames_route:
        steps = client.get(f"{episode}/frames").json()["views"][0]["steps"]
        return [f"{episode}/frames/env/{k}" for k in range(len(steps))]
    assets = client.get(episode).json()["assets"]
    return [f"{episode}/assets/{name}" for name in sorted(assets) if name.endswith("_env.png")]


def _announced(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + SERVE_DEADLINE_S
    while time.monotonic() < deadline:
        found = ANNOUNCE.search(log.read_text(errors="replace"))
        if found and _answers(found.group(1)):
            return found.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"serve exited: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    raise SystemExit("serve did not announce its URL in time")


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/eval/v2/queue", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _same_records(paths: list[Path]) -> bool:
    from agentcanvas.eval.config import EvalRun
    from agentcanvas.eval.invariance import diff_runs

    runs = [EvalRun.model_validate(_summary(p)) for p in paths]
    return all(not diff_runs(runs[0], other) for other in runs[1:])


def _kb(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def _report(graph: str, runs: dict[tuple[str, str], Path], serve: dict[str, Any]) -> None:
    before, after = (_frames_on_disk(runs[side, "every"]) for side in ("before", "after"))
    print(f"\n== {graph}: {after['episodes']} episodes, {after['frames']} frames (before: "
          f"{before['frames']})")  # fmt: skip
    for kind in ("apparent", "allocated"):
        b, a = before[kind], after[kind]
        per_frame = f"{b / before['frames']:,.0f} -> {a / after['frames']:,.0f} B"
        per_episode = f"{_kb(b / before['episodes'])} -> {_kb(a / after['episodes'])}"
        print(f"  bytes {kind:<9} before {_kb(b):>13}  after {_kb(a):>12}  ratio {a / b:.3f}"
              f"  per frame {per_frame}  per episode {per_episode}")  # fmt: skip
    for side in ("before", "after"):
        none, every = _wall_s(runs[side, "none"]), _wall_s(runs[side, "every"])
        print(
            f"  wall {side:<6} none {none:7.2f} s  every {every:7.2f} s  x none {every / none:.2f}"
        )
    for side in ("before", "after"):
        video_ms = [1000 * s for s in serve[side]["video_s"]]
        mp4 = _kb(statistics.median(serve[side]["video_bytes"]))
        line = (f"  first byte of a video ({side}): median {statistics.median(video_ms):.0f} ms, "
                f"max {max(video_ms):.0f} ms; mp4 {mp4}")  # fmt: skip
        print(line)
        first_ms = [1000 * s for s in serve[side]["frame_s"]]
        next_ms = [1000 * s for s in serve[side]["next_s"]]
        print(f"  scrubber ({side}): first frame median {statistics.median(first_ms):.0f} ms, "
              f"max {max(first_ms):.0f} ms; the next {FRAMES_STEPPED}: median "
              f"{statistics.median(next_ms):.0f} ms, max {max(next_ms):.0f} ms")  # fmt: skip
    same = _same_records(list(runs.values()))
    print(f"  records identical with and without frames, before and after: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 episodes of each graph")
    parser.add_argument("--cartpole", type=int, default=20, help="cartpole_mlp episodes")
    parser.add_argument("--babyai", type=int, default=12, help="babyai_oracle episodes per task")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--before", default=None, help="git ref of the PNG-frames code")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        graph, n, workers, mode, budget = args.worker
        _worker(graph, int(n), int(workers), mode, int(budget) or None)
        return
    plans = {
        "cartpole_mlp": (4 if args.quick else args.cartpole, 0),
        "babyai_oracle": (4 if args.quick else args.babyai, STEP_BUDGET_BABYAI),
    }
    ref = args.before or _before_ref()
    with tempfile.TemporaryDirectory(prefix="bench-frames-") as tmp:
        sides = {"before": _side_src(ref, Path(tmp)), "after": ROOT / "src"}
        print(f"before: {ref}; after: this tree; W={args.workers}")
        for graph, (n, budget) in plans.items():
            runs: dict[tuple[str, str], Path] = {}
            workspaces = {side: Path(tmp) / f"{side}-{graph}" for side in sides}
            for mode in ("none", "every"):
                for side, src in sides.items():  # interleaved: a load change hits both
                    workspaces[side].mkdir(exist_ok=True)
                    spec = [graph, str(n), str(args.workers), mode, str(budget)]
                    runs[side, mode] = _run(src, workspaces[side], spec)
            serve = {
                side: _serve_times(src, workspaces[side], runs[side, "every"], side == "after")
                for side, src in sides.items()
            }
            _report(graph, runs, serve)


if __name__ == "__main__":
    main()
