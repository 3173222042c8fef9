"""What a group really does right now: whether it serves (/health) and which verify arm it
runs. The arm comes from the plugin's metrics on /metrics (rollout.arm), else from the
launcher's own record (pid file, active systemd unit, status template); when the two disagree,
or neither knows, the arm is not confirmed and the caller must not gate or compare the group.
"""
from __future__ import annotations

from rollout.arm import read_arm
from rollout.client import EndpointError, request
from rollout.inventory import Group
from rollout.launchers import LaunchError


def healthy(group: Group, timeout: float, api_key: str | None = None) -> tuple[bool, str]:
    try:
        status, _, _ = request(group.url, "GET", "/health", timeout=timeout, api_key=api_key)
    except EndpointError as e:
        return False, str(e)
    return status == 200, f"{group.url}/health: HTTP {status}"


def launcher_can_tell(launcher) -> bool:
    """Whether "no record" from this launcher means "nothing of ours runs" (a command
    launcher without a status template knows nothing)."""
    return not (launcher.g.launcher == "command" and launcher.g.status is None)


def recorded_arm(launcher) -> tuple[str | None, str]:
    try:
        return launcher.recorded_arm()
    except LaunchError as e:
        return None, str(e)


def observe_arm(group: Group, launcher, timeout: float, api_key: str | None = None) -> tuple[str | None, str]:
    """(arm or None, how it is known). None means: not confirmed, and the text says why.

    /metrics unreachable (a server without --enable-metrics): the launcher's record decides.
    /metrics served without the plugin's series: the plugin is not loaded, so the server runs
    SGLang's own verify path -- triton, whatever its environment asked for."""
    rep = read_arm(group.url, api_key=api_key, timeout=timeout)
    rec, rec_how = recorded_arm(launcher)
    if rep.confirmed:
        if rec is not None and rec != rep.arm:
            return None, f"its metrics say {rep.arm} ({rep.summary()}) but its launcher says {rec} ({rec_how})"
        return rep.arm, f"metrics: {rep.summary()}"
    if rep.arm == "mixed":
        return None, f"its ranks disagree: {rep.summary()}"
    if not rep.error:  # metrics served, no plugin
        if rec == "triton":
            return "triton", f"SGLang's own verify path: {rep.summary()} (launcher record: {rec_how})"
        return None, (f"its /metrics has no mla-verify plugin series, so it runs SGLang's own verify path, but "
                      f"its launcher says {rec} ({rec_how}): the kernel is not loaded" if rec else
                      f"metrics: {rep.summary()}; launcher: {rec_how}")
    if rec is not None:
        return rec, f"launcher record: {rec_how} (metrics: {rep.summary()})"
    return None, f"metrics: {rep.summary()}; launcher: {rec_how}"
