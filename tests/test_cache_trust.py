"""The query cache's trust model (issue 36, item 5): lines are authenticated with a secret no
one derives from public data; forged, deep, long or torn lines are skipped and counted; the
folder is bounded.  README, "The query cache", states who may share a cache."""
import hashlib
import json
import os

import pytest

from addrsim.prove import store as st
from addrsim.prove.store import KEY_ENV, Store, open_store, secret_key, store_path, trim


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("ADDRSIM_CACHE_MAX_MB", raising=False)


REFUTED = ("refuted", {"batch": 3}, None, True, None, 1200)
PROVED = ("proved", None, None, True, None, 1200)


def _public_checksum(k: str, v: str) -> str:
    """The checksum a forger can compute: keyed only by public data (the source digest)."""
    return hashlib.blake2b((k + "\0" + v).encode(), digest_size=16, key=st.code_digest().encode()).hexdigest()


def test_the_key_file_is_private_and_random(tmp_path):
    s = open_store(tmp_path)
    key = tmp_path / "key"
    assert key.is_file() and (key.stat().st_mode & 0o777) == 0o600
    assert s.secret == key.read_bytes().strip() and len(s.secret) == 64
    other = tmp_path / "other"
    assert open_store(other).secret != s.secret                    # one secret per cache folder


def test_a_forged_line_with_a_public_checksum_is_ignored_and_counted(tmp_path):
    """The attack of issue 36: rewrite a refutation as a proof and recompute a checksum from
    public data.  Without the secret the line fails; the run counts it."""
    s = open_store(tmp_path)
    s["q"] = REFUTED
    rec = json.loads(s.path.read_text())
    rec["v"]["t"][0] = "proved"
    k, v = (json.dumps(rec[x], separators=(",", ":")) for x in ("k", "v"))
    rec["c"] = _public_checksum(k, v)
    s.path.write_text(json.dumps(rec) + "\n")
    again = open_store(tmp_path)
    assert "q" not in again and again.rejected == 1


def test_the_same_line_under_the_right_secret_is_read(tmp_path):
    s = open_store(tmp_path)
    s["q"] = REFUTED
    again = open_store(tmp_path)
    assert again["q"] == REFUTED and again.rejected == 0 and again.earlier("q")


def test_a_key_file_others_can_read_is_not_used(tmp_path):
    open_store(tmp_path)
    os.chmod(tmp_path / "key", 0o644)
    assert secret_key(tmp_path) is None
    s = open_store(tmp_path)
    assert s.path is None                                          # in memory: verdicts unchanged
    s["q"] = PROVED
    assert s["q"] == PROVED


def test_a_ci_secret_from_the_environment_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "x" * 40)
    s = open_store(tmp_path)
    s["q"] = PROVED
    assert not (tmp_path / "key").exists()
    assert open_store(tmp_path)["q"] == PROVED
    monkeypatch.setenv(KEY_ENV, "y" * 40)                          # another secret: nothing is believed
    other = open_store(tmp_path)
    assert "q" not in other and other.rejected == 1


def test_deep_long_and_torn_lines_are_skipped(tmp_path, monkeypatch):
    s = open_store(tmp_path)
    s["q"] = PROVED
    monkeypatch.setattr(st, "MAX_LINE", 4096)
    with open(s.path, "a") as fh:
        fh.write('{"k":' + "[" * 5000 + "]" * 5000 + ',"v":1,"c":"x"}\n')     # RecursionError in json
        fh.write('{"k":"' + "a" * 10000 + '","v":1,"c":"x"}\n')             # too long
        fh.write('{"k": "half\n')
        fh.write("\xff\xfe not utf-8\n")
    again = open_store(tmp_path)
    assert dict(again) == {"q": PROVED} and again.rejected == 4


def test_a_fifo_in_place_of_the_cache_file_does_not_hang(tmp_path):
    path = open_store(tmp_path).path                 # nothing written yet: no file
    os.mkfifo(path)
    again = open_store(tmp_path)
    assert again.path is None


def test_the_folder_is_bounded_oldest_out(tmp_path):
    s = open_store(tmp_path)
    old = tmp_path / "queries-0.0-old-s1.jsonl"
    old.write_bytes(b"x" * 4000)
    os.utime(old, (1, 1))
    for n in range(200):
        s[f"q{n}"] = PROVED
    size = s.path.stat().st_size
    trim(tmp_path, size + 100)                     # the other version's file goes first
    assert not old.exists() and s.path.stat().st_size == size
    trim(tmp_path, size // 2)                      # then the oldest lines of the current file
    again = Store(s.path, s.secret)
    assert 0 < len(again) < 200 and f"q199" in again and "q0" not in again
    assert s.path.stat().st_size <= size // 4 + 200


def test_a_forged_scan_report_is_not_read_and_the_run_says_so(tmp_path):
    """The attack of issue 36 end to end: a scan report rewritten to "all proved" with a
    recomputed public checksum.  The rescan decides again (the refutation stands) and its
    totals line counts the ignored lines."""
    import subprocess
    import sys
    from test_examples import MODEL, build
    k = build("lsed_bas_shortcut", tmp_path)
    argv = [sys.executable, "-m", "addrsim", "scan", "--no-progress", str(k), "--model", MODEL, "--buffer", "lse",
            "--layout", "sbhd", "--bound", "nhead_q=1:8", "--bound", "nhead_k=1:8", "--bound", "batch=1:16",
            "--cache-dir", str(tmp_path / "c")]
    env = dict(os.environ, ADDRSIM_NO_CACHE="")
    first = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert first.returncode == 1 and "CEX" in first.stdout
    (f,) = (tmp_path / "c").glob("queries-*.jsonl")
    forged = []
    for line in f.read_text().splitlines():
        rec = json.loads(line)
        text = json.dumps(rec["v"]).replace('"counterexample"', '"proved"')
        rec["v"] = json.loads(text)
        k_, v_ = (json.dumps(rec[x], separators=(",", ":")) for x in ("k", "v"))
        rec["c"] = _public_checksum(k_, v_)
        forged.append(json.dumps(rec))
    f.write_text("\n".join(forged) + "\n")
    again = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert again.returncode == 1 and "CEX" in again.stdout
    assert f"{len(forged)} query cache line(s) ignored" in again.stdout


def test_workers_racing_on_a_fresh_folder_all_get_the_one_key(tmp_path, monkeypatch):
    """A fresh-user trial (issue 40): `scan --jobs 2` on a new --cache-dir once read the key
    file between another worker's create and write, found it empty, and ran with the cache in
    memory only.  The key is now linked into place whole; eight processes started together
    all read the same 64 hex digits, and no temporary file is left."""
    import multiprocessing
    monkeypatch.delenv(KEY_ENV, raising=False)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(8) as pool:
        keys = pool.map(secret_key, [str(tmp_path)] * 8)
    assert len(set(keys)) == 1 and keys[0] is not None and len(keys[0]) == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]


def test_a_key_file_still_being_written_is_waited_for(tmp_path, monkeypatch):
    """An empty key file (another process, of an older addrsim, created it and writes it a
    moment later) is read again until it holds the key, not given up at once."""
    import threading
    monkeypatch.delenv(KEY_ENV, raising=False)
    key = tmp_path / "key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    threading.Timer(0.2, lambda: (os.write(fd, b"a" * 64), os.close(fd))).start()
    assert secret_key(tmp_path) == b"a" * 64


def test_a_cache_folder_that_is_a_file_says_so(tmp_path):
    """A trial (issue 40): --cache-dir naming a regular file ran without the cache, silently."""
    f = tmp_path / "x"
    f.write_text("x")
    s = open_store(f)
    assert s.path is None if hasattr(s, "path") else True
    assert "cannot be a cache folder" in s.note and "kept in memory only" in s.note
