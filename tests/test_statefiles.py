"""Every state-file reader against generated garbage (issue 17): corrupt state heals itself.

In-process, Hypothesis writes thousands of files in place of the conch's, the history's, the
gates' and the control records: random bytes, random JSON, valid records with one field of the
wrong type, NaN and infinities, huge numbers, deep nesting. Each reader must treat a bad file as
absent (quarantined: renamed aside and logged), never raise anything unexpected, and the command
that repairs it (bump, leave, unmute, a new utterance, ...) must always work afterwards. A handful
of the same goes through the CLI: no traceback, the right exit code.

Example counts are kept so the whole file runs in well under a minute.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.runner import run_vocal
from vocal.floor.conch.queue import Conch
from vocal.floor.conch.records import ConchBusy, Holder
from vocal.floor.control import endpoints
from vocal.floor.gates import Gates, gates_path, read_gates, set_muted
from vocal.floor.history import History
from vocal.floor.statefiles import (
    QUARANTINE_KEEP_COUNT,
    BadRecord,
    load_json,
    quarantine,
    quarantined,
    read_json,
    read_record,
    trim_quarantine,
)

#: Examples per property (STATEFILES_EXAMPLES overrides it, for a longer soak).
EXAMPLES = int(os.environ.get("STATEFILES_EXAMPLES", "200"))
HYPOTHESIS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                      suppress_health_check=[HealthCheck.function_scoped_fixture,
                                             HealthCheck.too_slow])  # fmt: skip

# -- what is generated ---------------------------------------------------------------------------
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30, 1e308, -1e308, 0.5]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20))
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),  # fmt: skip
    max_leaves=12,
)
DEEP = st.integers(min_value=500, max_value=120_000).map(lambda n: ("[" * n + "]" * n).encode())
SPECIALS = st.sampled_from([b"", b"null", b"1e999", b"-1e999", b"NaN", b'"x"', b"{", b"\xff\xfe",
                            b"9" * 5000, b'{"a": 1e999}', b"[" * 3000])  # fmt: skip


def dump(value: object) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def mutated(valid: dict) -> st.SearchStrategy[bytes]:
    """`valid` with some of its fields (or unknown ones) replaced by any JSON value."""
    keys = st.one_of(st.sampled_from(sorted(valid)), st.text(max_size=6))
    return st.dictionaries(keys, JSON_VALUES, min_size=1, max_size=3).map(
        lambda changes: dump({**valid, **changes})
    )


def contents(valid: dict) -> st.SearchStrategy[bytes]:
    """Anything a corrupt state file could hold, weighted towards near-valid records."""
    return st.one_of(
        st.binary(max_size=64),
        JSON_VALUES.map(dump),
        DEEP,
        SPECIALS,
        mutated(valid),
        mutated(valid),
    )


@pytest.fixture(autouse=True)
def no_settle_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """No 0.25 s pause after each bump or quarantined holder (what it is for is checked in
    test_conch_stress.py): thousands of examples would spend minutes asleep."""
    for module in ("queue", "files", "hold"):  # each reads its own binding
        monkeypatch.setattr(f"vocal.floor.conch.{module}.BUMP_SETTLE_S", 0.0)


def bad_names(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if ".bad-" in name]


# -- the loader ----------------------------------------------------------------------------------
@HYPOTHESIS
@given(content=st.one_of(st.binary(max_size=200), JSON_VALUES.map(dump), DEEP, SPECIALS))
def test_load_json_never_raises_anything_but_bad_record(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.json"
        path.write_bytes(content)
        try:
            load_json(path)
        except BadRecord:
            pass
        read_json(path)  # never raises at all


def test_quarantine_renames_aside_logs_and_trims(tmp_path: Path) -> None:
    path = tmp_path / "holder.json"
    path.write_text("[" * 10_000)
    logs = tmp_path / "logs"
    assert read_record(path, lambda d: d, log_dir=logs) is None
    (aside,) = bad_names(tmp_path)
    assert aside.startswith("holder.json.bad-") and not path.exists()
    assert "holder.json" in (logs / "statefiles.log").read_text()
    assert os.stat(logs).st_mode & 0o777 == 0o700
    assert os.stat(logs / "statefiles.log").st_mode & 0o777 == 0o600
    for _ in range(QUARANTINE_KEEP_COUNT + 5):
        path.write_text("{")
        quarantine(path, "test", log_dir=logs)
    assert len(bad_names(tmp_path)) == QUARANTINE_KEEP_COUNT  # the oldest are trimmed
    old = tmp_path / "grant.json.bad-1000"
    old.write_text("{")
    trim_quarantine(tmp_path)
    assert not old.exists()  # past QUARANTINE_KEEP_S
    assert [p.parent for p in quarantined(tmp_path)] == [tmp_path] * QUARANTINE_KEEP_COUNT


def test_a_file_replaced_since_it_was_read_is_not_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "holder.json"
    path.write_text("{")
    assert load_json(tmp_path / "missing.json") == (None, None)
    with open(path) as held_open:  # the inode stays ours: the new file cannot reuse it
        stale = os.fstat(held_open.fileno())
        fresh = tmp_path / "new.json"
        fresh.write_text("{}")
        os.replace(fresh, path)  # a writer put a new file in its place
        assert quarantine(path, "test", identity=stale) is None
    assert path.read_text() == "{}" and bad_names(tmp_path) == []


def test_links_fifos_and_directories_are_not_records(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text('{"muted": true}')
    home = tmp_path / "home"
    home.mkdir()
    gates_path(home).symlink_to(target)
    assert read_gates(home) == Gates()  # the link is not followed, and set aside
    assert target.exists() and not os.path.lexists(gates_path(home))
    os.mkfifo(gates_path(home))
    started = time.monotonic()
    assert read_gates(home) == Gates()  # no hang waiting for a writer
    assert time.monotonic() - started < 1.0
    gates_path(home).mkdir()
    assert read_gates(home) == Gates()
    assert set_muted(home, True).muted


# -- the conch ---------------------------------------------------------------------------------
NOW = time.time()
VALID_HOLDER = Holder("t0k3n", 3, "s", "agent", None, os.getpid(), None, "host", NOW,
                      NOW + 60).to_dict()  # fmt: skip
VALID_WAITER = {"seq": 7, "session": "w", "agent": None, "voice": None, "pid": None,
                "pid_start": None, "host": "h", "joined_at": NOW, "heartbeat_at": NOW,
                "order": 7.0}  # fmt: skip
VALID_GRANT = {"seq": 7, "session": "w", "granted_at": NOW, "claim_by": NOW + 5}
CONCH_FILES = {
    "holder.json": VALID_HOLDER,
    "grant.json": VALID_GRANT,
    "queue/0000000007.json": VALID_WAITER,
    "quiet.json": {"at": NOW},
    "lock": {"n": 1},
}


def check_conch_heals(directory: Path) -> None:
    """Status, bump and leave never fail, and afterwards the floor can be taken and given up."""
    conch = Conch(directory, lock_expiry_s=5.0, remote_ttl_s=5.0)
    state = conch.status()
    state.to_dict()
    for waiter in state.waiters:
        conch.leave(waiter.session)
    conch.bump()
    held = conch.acquire(session="repair", mode="callback")
    assert conch.holds(held.token)
    assert conch.release(held.token)
    assert conch.status().holder is None and conch.status().waiters == []


@pytest.mark.parametrize("name", sorted(CONCH_FILES))
def test_every_conch_file_heals(name: str) -> None:
    @HYPOTHESIS
    @given(content=contents(CONCH_FILES[name]))
    def check(content: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp) / "conch"
            Conch(directory).status()  # the layout, as a running vocal leaves it
            (directory / name).write_bytes(content)
            check_conch_heals(directory)
            if name not in ("lock", "quiet.json"):  # these two are harmless when garbled
                assert not (directory / name).exists()

    check()


@HYPOTHESIS
@given(holder=contents(VALID_HOLDER), waiter=contents(VALID_WAITER),
       grant=contents(VALID_GRANT))  # fmt: skip
def test_the_conch_heals_from_all_its_files_corrupt_at_once(holder: bytes, waiter: bytes,
                                                            grant: bytes) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "conch"
        Conch(directory).status()
        (directory / "holder.json").write_bytes(holder)
        (directory / "grant.json").write_bytes(grant)
        (directory / "queue" / "0000000007.json").write_bytes(waiter)
        (directory / "queue" / "0000000008.json").write_bytes(waiter)  # seq must match its name
        check_conch_heals(directory)


@HYPOTHESIS
@given(times=st.lists(st.floats(min_value=-1e12, max_value=1e12), min_size=4, max_size=4))
def test_conch_times_are_clamped_so_the_floor_always_moves(times: list[float]) -> None:
    """Holder, waiter and grant dated anywhere: the holder lasts at most its expiry, a waiter's
    heartbeat and a grant's claim are never later than now plus their windows."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "conch"
        conch = Conch(directory, lock_expiry_s=2.0, remote_ttl_s=3.0)
        conch.status()
        now = time.time()
        acquired, expires, heartbeat, claim = (now + t for t in times)
        holder = {**VALID_HOLDER, "pid": None, "acquired_at": acquired, "expires_at": expires}
        (directory / "holder.json").write_text(json.dumps(holder))
        (directory / "queue" / "0000000007.json").write_text(json.dumps(
            {**VALID_WAITER, "joined_at": heartbeat, "heartbeat_at": heartbeat}))  # fmt: skip
        (directory / "grant.json").write_text(json.dumps({**VALID_GRANT, "claim_by": claim}))
        state = conch.status()
        later = time.time()
        if state.holder is not None:
            assert state.holder.expires_at <= later + 2.0
            assert state.holder.acquired_at <= later
        for waiter in state.waiters:
            assert waiter.heartbeat_at <= later and waiter.joined_at <= later
        if state.grant is not None:
            assert state.grant.claim_by <= later + max(conch.local_claim_s, conch.remote_claim_s)
        holder = conch.status().to_dict()["holder"]
        assert holder is None or math.isfinite(holder["expires_in_s"])
        check_conch_heals(directory)


# -- the history -------------------------------------------------------------------------------
VALID_ENTRY = {"id": 5, "text": "t", "voice": None, "sample_rate": 16000, "created_at": NOW,
               "complete": True, "session": None, "agent": None, "frames": 0}  # fmt: skip
HISTORY_FILES = {"000005.json": VALID_ENTRY, "seq": {"n": 5},
                 "cursor.json": {"utterance_id": 5, "newest_id": 5, "at": NOW}}  # fmt: skip


def check_history_heals(directory: Path, size: int = 2) -> None:
    """Reading, walking and recording never fail; the size limit holds with no orphans."""
    import numpy as np

    history = History(directory, size)
    for entry in history.entries():
        entry.to_dict()
    history.step_back()
    for _ in range(size + 1):
        with history.begin(text="new", voice=None, sample_rate=16000) as recording:
            recording.append(np.zeros(160, np.float32))
    entries = history.entries()
    assert [e.text for e in entries] == ["new"] * size
    names = [n for n in os.listdir(directory) if ".bad-" not in n]
    jsons = {n[:-5] for n in names if n.endswith(".json") and n[:-5].isdigit()}
    assert jsons == {n[:-4] for n in names if n.endswith(".pcm")}
    assert history.step_back() is not None


@pytest.mark.parametrize("name", sorted(HISTORY_FILES))
def test_every_history_file_heals(name: str) -> None:
    @HYPOTHESIS
    @given(content=contents(HISTORY_FILES[name]))
    def check(content: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp) / "history"
            directory.mkdir()
            (directory / name).write_bytes(content)
            (directory / "000005.pcm").write_bytes(b"\0\0" * 10)
            check_history_heals(directory)

    check()


# -- the gates and the control records -----------------------------------------------------------
@HYPOTHESIS
@given(content=contents({"muted": False, "volume_percent": 100}))
def test_gates_heal(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        gates_path(home).write_bytes(content)
        gates = read_gates(home)
        assert isinstance(gates.muted, bool) and 0 <= gates.volume_percent <= 200
        assert set_muted(home, False) == Gates(False, gates.volume_percent)
        assert read_gates(home) == Gates(False, gates.volume_percent)


@HYPOTHESIS
@given(content=contents({"pid": os.getpid(), "pid_start": None, "socket": "x.sock",
                         "started_at": NOW, "session": "s", "agent": None,
                         "kind": "speak"}))  # fmt: skip
def test_control_records_heal(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        name = f"{os.getpid()}.json"
        (run_dir / name).write_bytes(content)
        found = endpoints(run_dir)
        assert all(e.pid == os.getpid() for e in found)
        if not found:  # not a record of ours: set aside or removed, never read again
            assert not (run_dir / name).exists()
        assert endpoints(run_dir) == found


# -- a handful through the CLI -------------------------------------------------------------------
DEEP_TEXT = "[" * 100_000 + "]" * 100_000
CLI_CASES = [
    ("conch/holder.json", DEEP_TEXT, ["conch", "bump"]),
    ("conch/holder.json", '{"token": "t", "seq": 1, "session": "s", "expires_at": "soon"}',
     ["conch", "status"]),
    ("conch/queue/0000000003.json", '{"seq": 3, "session": "s", "heartbeat_at": NaN}',
     ["conch", "wait", "--session", "me", "--timeout", "3"]),
    ("conch/grant.json", '{"seq": 1e999}', ["conch", "status", "--json"]),
    ("gates.json", DEEP_TEXT, ["unmute"]),
    ("gates.json", '{"volume_percent": "loud"}', ["volume", "30"]),
    ("history/000001.json", '{"id": 1, "sample_rate": 1e999}', ["replay", "--list"]),
    ("run/1.json", DEEP_TEXT, ["control", "status", "--json"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "content", "command"), CLI_CASES)
def test_the_cli_repairs_corrupt_state(vocal_home: Path, name: str, content: str,
                                       command: list[str]) -> None:  # fmt: skip
    Conch(vocal_home / "conch").status()  # the layout, as a running vocal leaves it
    path = vocal_home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    result = run_vocal(*command, timeout=60)
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "Traceback" not in stderr and "unexpected" not in stderr
    assert not path.exists() or path.read_text() != content  # set aside, or repaired
    # reported for `vocal doctor`
    assert [p.name.startswith(f"{path.name}.bad-") for p in quarantined(vocal_home)] == [True]
    again = run_vocal("conch", "status", "--json", timeout=60)  # and the state works again
    assert again.returncode == 0 and b"Traceback" not in again.stderr


def test_a_busy_floor_is_still_a_clean_exit_3(vocal_home: Path) -> None:
    conch = Conch(vocal_home / "conch")
    conch.acquire(session="holder")
    (vocal_home / "conch" / "queue" / "0000000099.json").write_text("[" * 50_000)
    result = run_vocal("conch", "wait", "--session", "me", "--callback", timeout=60)
    assert result.returncode == 3 and b"Traceback" not in result.stderr
    with pytest.raises(ConchBusy):
        conch.acquire(session="other", mode="callback")


def test_a_lock_counter_garbled_to_a_huge_number_still_numbers_valid_records(
    tmp_path: Path,
) -> None:
    """Found by Hypothesis in a fresh CI run: a lock file holding 10**18 numbered the next
    holder past the range its record is validated against, so the floor was taken and at once
    set aside as malformed. The counter starts again above the numbers in use."""
    directory = tmp_path / "conch"
    Conch(directory).status()
    (directory / "lock").write_bytes(b"1000000000000000000")
    conch = Conch(directory, lock_expiry_s=5.0, remote_ttl_s=5.0)
    held = conch.acquire(session="repair", mode="callback")
    assert conch.holds(held.token) and held.seq == 1
