"""A forged publish journal renames nothing: every entry must be one tokenloom's writer
makes (plain names of the journal's folder, the prefix's own finals, temporaries named,
typed and owned as the writer makes them), else every reader and writer of the prefix
gets one FormatError naming the journal and the entry, and no file anywhere moves."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy
import pytest

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder, publish, publish_journal

NOBODY = 65534


def _write(prefix: str, documents, sidecar: bytes = b'{"gen": 1}') -> str:
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for document in documents:
        builder.add_item(document)
        builder.end_document()
    builder.finalize(f"{prefix}.idx", extra_files={".json": sidecar})
    return prefix


def _documents(prefix: str) -> list:
    with IndexedDataset(prefix) as dataset:
        return [dataset[i].tolist() for i in range(len(dataset))]


def _snapshot(root: Path) -> dict:
    """Every name under ``root`` with its bytes (or where its link points)."""
    seen = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if os.path.islink(path):
                seen[relative] = "-> " + os.readlink(path)
            elif name != publish.LOCK_NAME:
                seen[relative] = Path(path).read_bytes()
    return seen


def _journal(prefix: str, moves) -> str:
    path = publish.journal_path(prefix)
    Path(path).write_text(json.dumps({"format": publish_journal.JOURNAL_FORMAT, "moves": moves}))
    return path


@pytest.fixture
def setting(tmp_path):
    """A published pair ``d/data`` next to a file of another folder and another prefix."""
    (tmp_path / "d").mkdir()
    (tmp_path / "outside").mkdir()
    prefix = _write(str(tmp_path / "d" / "data"), [[1, 2], [3]])
    _write(str(tmp_path / "d" / "other"), [[5, 5]])
    (tmp_path / "outside" / "secret").write_bytes(b"not yours")
    (tmp_path / "d" / "victim.bin").write_bytes(b"somebody's file")
    return tmp_path, prefix


def _plant(root: Path, name: str) -> str:
    """A file a forger made (a would-be temporary) at ``root/name``; returns its name."""
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"forged " + name.encode())
    return name


def _forgeries(root: Path) -> dict:
    d, outside = root / "d", str(root / "outside")
    tmp = ".data.idx.abcd1234.tmp"
    return {
        "absolute-temporary": [[os.path.join(outside, "secret"), "data.idx"]],
        "absolute-final": [[_plant(d, tmp), os.path.join(outside, "secret")]],
        "dotdot-temporary": [["../outside/secret", "data.idx"]],
        "dotdot-final": [[_plant(d, tmp), "../outside/secret"]],
        "another-prefix": [[_plant(d, ".other.idx.abcd1234.tmp"), "other.idx"]],
        "another-prefix-sidecar": [[_plant(d, ".data.x.json.abcd1234.tmp"), "data.x.json"]],
        "not-a-temporary": [["victim.bin", "data.bin"]],
        "temporary-of-another-final": [[_plant(d, ".data.json.abcd1234.tmp"), "data.idx"]],
        "nul": [[_plant(d, tmp), "data.idx\x00"]],
        "not-a-pair": [[_plant(d, tmp), "data.idx", "x"]],
        "second-entry": [[_plant(d, tmp), "data.idx"], ["victim.bin", "data.bin"]],
    }


FORGERIES = list(_forgeries(Path("/nonexistent-just-the-names")).keys())


@pytest.mark.parametrize("case", FORGERIES)
def test_a_forged_entry_renames_nothing_and_names_the_journal_and_the_entry(setting, case):
    root, prefix = setting
    moves = _forgeries(root)[case]
    journal = _journal(prefix, moves)
    before = _snapshot(root)
    entry = "entry 1" if case == "second-entry" else "entry 0"
    for attempt in (lambda: IndexedDataset(prefix), lambda: _write(prefix, [[7]])):
        with pytest.raises(FormatError, match="publish journal") as caught:
            attempt()
        assert journal in str(caught.value) and entry in str(caught.value)
        assert "nothing was renamed" in str(caught.value)
        after = _snapshot(root)
        assert after == before  # reader and writer alike: no file anywhere moved
    os.unlink(journal)  # what the error says to do
    assert _documents(prefix) == [[1, 2], [3]]
    assert _documents(str(root / "d" / "other")) == [[5, 5]]


def test_a_journal_that_is_a_symbolic_link_is_refused(setting):
    root, prefix = setting
    elsewhere = root / "outside" / "journal"  # a journal that would be valid in place
    tmp = _plant(root / "d", ".data.idx.abcd1234.tmp")
    elsewhere.write_text(
        json.dumps({"format": publish_journal.JOURNAL_FORMAT, "moves": [[tmp, "data.idx"]]})
    )
    os.symlink(elsewhere, publish.journal_path(prefix))
    before = _snapshot(root)
    with pytest.raises(
        FormatError, match=r"publish journal is not a regular file \(a symbolic link\)"
    ):
        IndexedDataset(prefix)
    assert _snapshot(root) == before


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "directory"])
def test_a_temporary_that_is_not_a_plain_file_of_its_own_is_refused(setting, kind):
    root, prefix = setting
    tmp = root / "d" / ".data.idx.abcd1234.tmp"
    if kind == "symlink":
        os.symlink(root / "outside" / "secret", tmp)
    elif kind == "hardlink":
        os.link(root / "outside" / "secret", tmp)
    else:
        tmp.mkdir()
    _journal(prefix, [[tmp.name, "data.idx"]])
    before = _snapshot(root)
    with pytest.raises(FormatError, match="not a plain file of its own"):
        IndexedDataset(prefix)
    assert _snapshot(root) == before


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file another owner needs root")


def test_a_temporary_of_another_owner_than_the_journal_is_refused(setting):
    _as_root()
    root, prefix = setting
    tmp = _plant(root / "d", ".data.idx.abcd1234.tmp")
    journal = _journal(prefix, [[tmp, "data.idx"]])
    os.chown(journal, NOBODY, NOBODY)  # the forger wrote the journal; root owns the temporary
    before = _snapshot(root)
    with pytest.raises(FormatError, match="other owners"):
        IndexedDataset(prefix)
    assert _snapshot(root) == before


@pytest.mark.parametrize("sticky", [True, False], ids=["sticky", "plain"])
def test_in_a_sticky_folder_only_the_owner_of_a_final_may_replace_it(setting, sticky):
    _as_root()
    root, prefix = setting
    folder = root / "d"
    os.chmod(folder, 0o1777 if sticky else 0o777)
    good = _write(str(root / "good"), [[8, 8, 8]])  # a complete pair to forge a publish of
    moves = []
    for suffix in (".bin", ".idx"):
        tmp = folder / f".data{suffix}.abcd1234.tmp"
        tmp.write_bytes(Path(f"{good}{suffix}").read_bytes())
        os.chown(tmp, NOBODY, NOBODY)
        moves.append([tmp.name, f"data{suffix}"])
    os.chown(_journal(prefix, moves), NOBODY, NOBODY)
    if sticky:  # nobody could not have replaced root's files there itself
        before = _snapshot(root)
        with pytest.raises(FormatError, match="sticky directory"):
            IndexedDataset(prefix)
        assert _snapshot(root) == before
    else:  # anyone who may write the folder may replace its files: rolled forward
        assert _documents(prefix) == [[8, 8, 8]]


def test_a_temporary_swapped_after_its_check_is_removed_and_reported(setting):
    root, prefix = setting
    tmp = root / "d" / ".data.json.abcd1234.tmp"
    tmp.write_bytes(b'{"gen": 2}')
    journal = _journal(prefix, [[tmp.name, "data.json"]])
    moves = publish_journal.read(journal, "data")
    tmp.unlink()  # swapped for a link between the check and the rename
    os.symlink(root / "outside" / "secret", tmp)
    with pytest.raises(FormatError, match="was replaced between its check and its rename"):
        publish_journal.carry_out(journal, moves)
    assert not os.path.lexists(root / "d" / "data.json")
    assert (root / "outside" / "secret").read_bytes() == b"not yours"


def test_too_many_entries_are_refused(setting):
    root, prefix = setting
    _journal(prefix, [["a", "b"]] * (publish_journal.MAX_MOVES + 1))
    with pytest.raises(FormatError, match="publish journal is unreadable .*at most 1024"):
        IndexedDataset(prefix)


def test_a_bin_with_another_name_or_folder_is_published_and_journals_only_plain_names(
    tmp_path, monkeypatch
):
    (tmp_path / "d").mkdir()
    (tmp_path / "e").mkdir()
    prefix = str(tmp_path / "d" / "data")
    journals: list = []
    real = publish_journal.encode

    def recording(entries):
        journals.append([list(pair) for pair in entries])
        return real(entries)

    monkeypatch.setattr(publish_journal, "encode", recording)
    for bin_path in (tmp_path / "e" / "elsewhere.bin", tmp_path / "d" / "renamed.bin"):
        builder = IndexedDatasetBuilder(str(bin_path), dtype=numpy.uint16)
        builder.add_item([4, 2])
        builder.end_document()
        builder.finalize(f"{prefix}.idx", extra_files={".json": b"{}"})
        assert bin_path.read_bytes() == numpy.array([4, 2], numpy.uint16).tobytes()
    assert sorted(os.listdir(tmp_path / "d")) == ["data.idx", "data.json", "renamed.bin"]
    assert os.listdir(tmp_path / "e") == ["elsewhere.bin"]
    for entries in journals:
        assert sorted(final for _, final in entries) == ["data.idx", "data.json"]
        assert all("/" not in tmp and tmp.startswith(".data.") for tmp, _ in entries)


def test_a_publish_refuses_a_temporary_not_named_by_temporary_sibling(tmp_path):
    prefix = str(tmp_path / "data")
    (tmp_path / "mine.tmp").write_bytes(b"x")
    with pytest.raises(FormatError, match="temporary_sibling"):
        publish.publish_pair(prefix, [(str(tmp_path / "mine.tmp"), f"{prefix}.idx")])
    assert sorted(os.listdir(tmp_path)) == ["mine.tmp"]


@pytest.mark.parametrize("suffix", [".x.json", ".x.idx", "json", ".", ".a b", ".bin"])
def test_extra_file_suffixes_are_one_dot_and_never_another_prefix_s_file(tmp_path, suffix):
    builder = IndexedDatasetBuilder(str(tmp_path / "x.bin"))
    builder.add_item([1])
    builder.end_document()
    with pytest.raises(FormatError, match="extra file suffix"):
        builder.finalize(str(tmp_path / "x.idx"), extra_files={suffix: b"{}"})
    assert os.listdir(tmp_path) == []
