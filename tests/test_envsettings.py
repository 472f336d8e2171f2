"""Settings from the environment are checked: a bad one is refused naming the variable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentcanvas import envsettings
from agentcanvas.errors import ConfigError
from agentcanvas.server.batching import policy_from_env
from agentcanvas.server.deadlines import call_timeout_s

CLI_TIMEOUT_S = 60.0
SRC = Path(envsettings.__file__).parent


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("AGENTCANVAS_MAX_BATCH", "0", "an integer from 1 to 1024"),
        ("AGENTCANVAS_NUM_THREADS", "-2", "an integer from 1 to 1024"),
        ("AGENTCANVAS_CALL_TIMEOUT_S", "nan", "a number from 0.001 to 86400"),
        ("AGENTCANVAS_CALL_TIMEOUT_S", "0", "a number from 0.001 to 86400"),
        ("AGENTCANVAS_SERVER_READY_TIMEOUT_S", "soon", "a number from 1 to 3600"),
        ("AGENTCANVAS_FORK_SERVERS", "yes", "one of 0, 1"),
        ("AGENTCANVAS_CALL_TRANSPORT", "udp", "one of ipc, tcp"),
        ("AGENTCANVAS_CALL_SHARED_MEMORY", "on", "one of 0, 1"),
        ("AGENTCANVAS_FLUSH_POLICY", "fastest", "one of none, restart_on_submit, ours"),
        ("AGENTCANVAS_AUDIT_RATE", "1.5", "a number from 0 to 1"),
        ("AGENTCANVAS_AUDIT_RATE", "often", "a number from 0 to 1"),
        ("AGENTCANVAS_AUDIT_SEED", "-1", "an integer from 0 to 999999999999999999"),
        ("AGENTCANVAS_AUDIT_SEED", "1e3", "an integer from 0 to 999999999999999999"),
        ("AGENTCANVAS_EVAL_SUBPROCESS", "no", "one of 0, 1"),
    ],
)
def test_a_bad_setting_is_refused_naming_it_and_its_range(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, accepted: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        envsettings.check_all()
    assert str(err.value).startswith(f"{name} must be {accepted}, not {value!r}")
    assert "unset it for the default" in str(err.value)


def test_settings_are_read_when_used(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in envsettings.ALL:
        monkeypatch.delenv(setting.name, raising=False)
    envsettings.check_all()
    assert call_timeout_s() == 60.0
    monkeypatch.setenv("AGENTCANVAS_CALL_TIMEOUT_S", "2.5")
    assert call_timeout_s() == 2.5
    monkeypatch.setenv("AGENTCANVAS_MAX_BATCH", " ")  # empty means unset
    assert policy_from_env().max_batch == 8


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentcanvas", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("AGENTCANVAS_MAX_BATCH", "0", "an integer from 1 to 1024"),
        ("AGENTCANVAS_AUDIT_RATE", "2", "a number from 0 to 1"),
        ("AGENTCANVAS_AUDIT_SEED", "seven", "an integer from 0 to 999999999999999999"),
        ("AGENTCANVAS_EVAL_SUBPROCESS", "off", "one of 0, 1"),
    ],
)
def test_a_bad_setting_stops_the_cli_before_anything_runs(
    tmp_path: Path, name: str, value: str, accepted: str
) -> None:
    env = {**os.environ, "AGENTCANVAS_HOME": str(tmp_path)}
    assert _cli(env, "nodesets").returncode == 0  # the same command runs when the value is good
    proc = _cli({**env, name: value}, "nodesets")
    assert proc.returncode == 1, proc.stderr
    assert f"{name} must be {accepted}, not {value!r}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_eval_subprocess_setting_stops_serve_before_it_listens(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTCANVAS_HOME": str(tmp_path), "AGENTCANVAS_EVAL_SUBPROCESS": "no"}
    proc = _cli(env, "serve", "--port", "0")  # a serve that started would outlive the timeout
    assert proc.returncode == 1, proc.stderr
    assert "AGENTCANVAS_EVAL_SUBPROCESS must be one of 0, 1, not 'no'" in proc.stderr
    assert "agentcanvas backend on" not in proc.stdout + proc.stderr


# Names read elsewhere on purpose: paths and secrets (no range to check), the process
# plumbing between a server and its parent, and the scheduler's own checked settings.
NOT_RANGED = {
    "AGENTCANVAS_HOME",
    "AGENTCANVAS_TOKEN",
    "AGENTCANVAS_URL",  # the CLI's backend URL: checked as a URL where it is read
    "AGENTCANVAS_PARENT_PID",
    "AGENTCANVAS_READY_FD",
    "AGENTCANVAS_RAY_PLACEMENT_GROUP",  # scheduler -> eval process: the group it reserved
}
CHECKED_ELSEWHERE = "scheduler"
NAME = re.compile(r"[\"'](AGENTCANVAS_[A-Z0-9_]+)[\"']")


def test_every_agentcanvas_setting_in_src_is_declared_in_envsettings() -> None:
    declared = {setting.name for setting in envsettings.ALL}
    read: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC)
        if relative.parts[0] == CHECKED_ELSEWHERE or path.name == "envsettings.py":
            continue
        for name in NAME.findall(path.read_text("utf-8")):
            read.setdefault(name, str(relative))
    undeclared = {n: where for n, where in read.items() if n not in declared | NOT_RANGED}
    assert not undeclared, f"declare these in envsettings.py (with a range): {undeclared}"
