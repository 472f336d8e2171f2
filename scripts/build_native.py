"""Build the compiled copy of ``agentcanvas.graph.summarize`` (mypyc); ``make test`` runs it.

The firing log summarises every firing's values on the episode's path; mypyc compiles that
walk to C, about 2.5x faster (docs/cluster.md, "Head cost"). The copy is the module's
source down to its section on the copy, with the whole file's SHA-256 (``SOURCE_SHA256``),
compiled as ``agentcanvas.graph._summarize_compiled`` into ``build/native/`` and copied beside
the module, which loads it only while that digest is its own: a copy built from an older
version of the file is never run. Nothing else changes: where the copy cannot be built (no
C compiler, no Python headers) this prints why and exits 1, and the module's Python walk
runs, giving the same summaries (tests/graph/test_summarize.py compares the two).

Usage: python scripts/build_native.py
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "agentcanvas" / "graph" / "summarize.py"
NAME = "_summarize_compiled"  # summarize.COMPILED_NAME (not imported: the build needs no package)
WORK = ROOT / "build" / "native"
CUT_AT = b"\n# -- the compiled copy"  # the module's section that loads the copy: not in it


def main() -> int:
    text = SOURCE.read_bytes()
    digest = hashlib.sha256(text).hexdigest()
    shutil.rmtree(WORK, ignore_errors=True)
    package = WORK / "agentcanvas" / "graph"
    package.mkdir(parents=True)
    for folder in (WORK / "agentcanvas", package):
        (folder / "__init__.py").write_text("")
    copy = package / f"{NAME}.py"
    walk, found, _ = text.partition(CUT_AT)
    if not found:
        print(f"{SOURCE} has no line starting {CUT_AT.decode().strip()!r}", file=sys.stderr)
        return 1
    copy.write_bytes(walk + f'\nSOURCE_SHA256: Final = "{digest}"\n'.encode())
    config = WORK / "mypy.ini"  # not the project's: its mypy_path would find src's package too
    config.write_text("[mypy]\nstrict = True\nignore_missing_imports = True\n")
    command = [sys.executable, "-m", "mypyc", "--config-file", str(config), str(copy)]
    done = subprocess.run(command, cwd=WORK, capture_output=True, text=True, check=False)
    built = sorted(glob.glob(str(package / f"{NAME}*.so")))
    if done.returncode != 0 or not built:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
        print(
            f"the compiled summariser could not be built (mypyc exit {done.returncode}): "
            "the firing log uses the Python one (slower, the same summaries)",
            file=sys.stderr,
        )
        return 1
    target = SOURCE.parent
    for stale in glob.glob(str(target / f"{NAME}*.so")):
        os.unlink(stale)
    for path in built:  # the module and mypyc's runtime library beside it
        name = Path(path).name
        temp = target / f".{name}.tmp"
        shutil.copyfile(path, temp)
        os.replace(temp, target / name)
    print(f"compiled {SOURCE.relative_to(ROOT)} ({digest[:12]}): {len(built)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
