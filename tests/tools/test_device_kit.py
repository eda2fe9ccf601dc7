"""The device kit fits its 15 minutes of device time, the machine's start included (tools/device/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

KIT = Path(__file__).resolve().parents[2] / "tools" / "device"
CALLS_S = 660  # 15 minutes less the machine's start (minutes) and the idle wait between the calls


def _default(script: str, variable: str, env: str | None = None) -> int:
    """``variable``'s default in ``script`` (``VARIABLE=${ENV:-N}``)."""
    found = re.search(rf"{variable}=\$\{{{env or variable}:-(\d+)\}}", (KIT / script).read_text())
    assert found, f"{script} sets no default {variable}"
    return int(found.group(1))


def test_the_readme_s_calls_add_up_to_at_most_660_s_and_each_script_stops_inside_its_call():
    calls = re.findall(
        r'^run\(command="bash tools/device/(call_\w+)\.sh".*timeout_s=(\d+)\)$', (KIT / "README.md").read_text(), re.M
    )
    limits = {name: int(seconds) for name, seconds in calls}
    assert sorted(limits) == ["call_a", "call_b"], calls
    assert sum(limits.values()) <= CALLS_S, limits
    # Each script's own clock leaves its call time to collect what it made before the call's timeout.
    assert _default("call_a.sh", "BUDGET_S", "CALL_A_BUDGET_S") <= limits["call_a"] - 10
    assert _default("call_b.sh", "SWEEP_LIMIT_S") <= limits["call_b"] - 60
    for name, seconds in limits.items():  # the scripts' own comments say the calls as the README does
        assert f"timeout_s={seconds})" in (KIT / f"{name}.sh").read_text(), name


def test_call_a_s_first_gpu_work_is_the_pack_check_then_the_captured_pack_of_8():
    script = (KIT / "call_a.sh").read_text()
    assert script.index("two_member_pack_s_forward_and_backward") < script.index('done <"$ARMS"')
    assert "env_report.py" not in script.split("pack check")[0]  # nothing on the GPU before it
    steps = [line for line in (KIT / "gpu_epoch_arms.txt").read_text().splitlines() if line[:1] not in ("#", "")]
    assert "--packs 8" in steps[0] and "--capture on" in steps[0] and "--stages spt" in steps[0]
    assert {"@env_report", "@cuda_tests"} <= {line.split()[0] for line in steps}
