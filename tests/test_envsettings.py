"""Settings from the environment are checked: a bad one is refused naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentcanvas import envsettings
from agentcanvas.errors import ConfigError
from agentcanvas.server.batching import policy_from_env
from agentcanvas.server.deadlines import call_timeout_s

CLI_TIMEOUT_S = 60.0


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
        ("AGENTCANVAS_FLUSH_POLICY", "fastest", "one of none, restart_on_submit, ours"),
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


def test_a_max_batch_of_zero_stops_the_cli_before_anything_runs() -> None:
    env = {**os.environ, "AGENTCANVAS_MAX_BATCH": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "agentcanvas", "nodesets"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "AGENTCANVAS_MAX_BATCH must be an integer from 1 to 1024, not '0'" in proc.stderr
    assert "Traceback" not in proc.stderr
