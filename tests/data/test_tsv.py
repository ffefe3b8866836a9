"""read_tsv: every kind of bad line is reported with its 1-based number."""

import gzip

import pytest

from kseq.data.tsv import format_problems, read_tsv

GOOD = "hello\tbonjour\n"
# Line 2 onwards: one bad line per kind of problem, then two good lines.
MIXED = (
    b"\xef\xbb\xbfhello\tbonjour\r\n"  # BOM and CRLF are fine
    b"no tab here\n"
    b"one\ttwo\tthree\n"
    b"\n"
    b"   \t target only\n"
    b"source only\t  \n"
    b"caf\xe9\tnot utf-8\n"
    b"  spaced \t out   text \n"
    b"Cre\xcc\x81a\tcr\xc3\xa9a"  # no final newline; decomposed accent becomes NFC
)
EXPECTED_PROBLEMS = [
    (2, "no tab"),
    (3, "more than one tab"),
    (4, "empty line"),
    (5, "empty source"),
    (6, "empty target"),
    (7, "not UTF-8"),
]


def write(tmp_path, data, name="pairs.tsv"):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def test_every_problem_kind_with_its_line_number(tmp_path):
    sources, targets, problems = read_tsv(write(tmp_path, MIXED))
    assert sources == ["hello", "spaced", "Cr\u00e9a"]
    assert targets == ["bonjour", "out text", "cr\u00e9a"]
    assert problems == EXPECTED_PROBLEMS


def test_raise_lists_problems_and_path(tmp_path):
    path = write(tmp_path, MIXED)
    with pytest.raises(ValueError, match=r"pairs\.tsv'?: 6 of 9 lines.*line 2 \(no tab\), "
                                         r"line 3 \(more than one tab\).* and 1 more"):
        read_tsv(path, on_error="raise")
    assert read_tsv(write(tmp_path, GOOD * 2), on_error="raise")[2] == []


def test_on_error_is_validated(tmp_path):
    with pytest.raises(ValueError, match="`on_error`"):
        read_tsv(write(tmp_path, GOOD), on_error="ignore")


def test_missing_file_names_path_and_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"`path`.*nope\.tsv"):
        read_tsv(tmp_path / "nope.tsv")


def test_directory_is_rejected(tmp_path):
    with pytest.raises(ValueError, match=r"`path`.*directory"):
        read_tsv(tmp_path)


@pytest.mark.parametrize("data, message", [
    (b"", r"pairs.tsv: the file is empty: expected source<TAB>target lines$"),
    (b"\n\n", r"pairs.tsv: line 1 is blank: expected source<TAB>target; no line of the file is good$"),
    (b"a b\n\tx\n", r"pairs.tsv: line 1 has no tab: expected source<TAB>target; no line of the file is good$"),
])
def test_file_without_valid_lines(tmp_path, data, message):
    with pytest.raises(ValueError, match=message):
        read_tsv(write(tmp_path, data))


def test_format_problems(tmp_path):
    _, _, problems = read_tsv(write(tmp_path, MIXED))
    assert format_problems(problems, tmp_path / "pairs.tsv", total_lines=9) == (
        "skipped 6 of 9 lines in pairs.tsv: line 2 (no tab), line 3 (more than one tab), "
        "line 4 (empty line), line 5 (empty source), line 6 (empty target) and 1 more"
    )
    one = format_problems(problems[:1], "pairs.tsv")
    assert one == "skipped 1 line in pairs.tsv: line 2 (no tab)"
    assert format_problems([], "pairs.tsv") == ""


def test_a_gzip_file_reads_as_its_plain_text(tmp_path):
    plain, packed = tmp_path / "pairs.tsv", tmp_path / "pairs.bin"  # gzip is known by its bytes, not its name
    plain.write_bytes(MIXED)
    packed.write_bytes(gzip.compress(MIXED))
    assert read_tsv(packed) == read_tsv(plain)
    (tmp_path / "cut.gz").write_bytes(gzip.compress(MIXED)[:-12])
    with pytest.raises(ValueError, match="damaged gzip"):
        read_tsv(tmp_path / "cut.gz")


def test_several_files_read_in_order_with_problems_per_file(tmp_path, capsys):
    from kseq.data.splits import read_tsv_files

    (tmp_path / "a.tsv").write_bytes(MIXED)
    (tmp_path / "b.tsv.gz").write_bytes(gzip.compress(GOOD.encode() + b"no tab\n"))
    sources, targets = read_tsv_files(f"{tmp_path}/a.tsv,{tmp_path}/*.gz", "train")
    assert sources == read_tsv(tmp_path / "a.tsv")[0] + ["hello"] and targets[-1] == "bonjour"
    printed = capsys.readouterr().out
    assert "skipped 6 of 9 lines in a.tsv" in printed and "skipped 1 of 2 lines in b.tsv.gz: line 2 (no tab)" in printed
    with pytest.raises(ValueError, match="--valid-tsv .*matches no file"):
        read_tsv_files(f"{tmp_path}/*.missing", "valid")
