"""Untrusted bags: each crafted defect ends in a BagError naming the file, or in a read that
reports the problem and names the file; never a traceback, a hang or gigabytes of memory.

Every bag is a real file: MCAP written by the `mcap` library and then corrupted field by field,
sqlite3 and metadata.yaml written by the project's BagWriter and then edited. Each is opened in a
child process under an address-space limit (an allocation of gigabytes fails there instead of
swapping) that runs the Python API (bag_info, BagReader.messages), `sim2real bag info` and
`sim2real bag repair`, and reports its outcome, its time and its peak memory.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mcap.data_stream import RecordBuilder
from mcap.records import Channel, Chunk, ChunkIndex, DataEnd, Footer, Header, McapRecord, Schema, Statistics
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter
from support import REPO_ROOT, run_measured

from sim2real_ros.bags.info import bag_info
from sim2real_ros.bags.storage import zstd
from sim2real_ros.bags.writer import BagWriter
from sim2real_ros.cli.main import main as cli_main

MAGIC = b"\x89MCAP0\r\n"
T0 = 1_700_000_000_000_000_000  # log time of the first message [ns]
N_MESSAGES = 3
CHILD_ADDRESS_SPACE = 768 * 2**20  # [bytes]: imports take ~160 MiB of address space, the old bomb 850 MiB
MAX_RSS = 300 * 2**20  # peak resident memory a child may reach [bytes]
MAX_SECONDS = 5.0  # what the child does after its imports [s]; the old bomb took 13 s
CHILD_DEADLINE = 60.0  # [s] a child still running then is killed and the test fails

# Runs in the child: API, then the CLI in the same process (its stderr captured), then repair.
PROBE = r"""
import contextlib, io, json, sys, time
from sim2real_ros.bags import BagReader
from sim2real_ros.bags.info import bag_info
from sim2real_ros.cli.main import main
from sim2real_ros.core.errors import BagError

bag = sys.argv[1]
start = time.monotonic()
out = {}
try:
    info = bag_info(bag)
    with BagReader(bag) as reader:
        out["read"] = sum(1 for _ in reader.messages())
        extra = [p for p in reader.problems if p not in info.problems]
    out.update(error=None, count=info.message_count, problems=info.problems + extra)
except BagError as err:
    out["error"] = str(err)
for action in ("info", "repair"):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(["bag", action, bag])
    out[action] = {"rc": rc, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}
out["seconds"] = time.monotonic() - start
print(json.dumps(out))
"""


# ---------------------------------------------------------------------------- running a child
@dataclasses.dataclass
class Outcome:
    """What the probe child reported, with its peak resident memory [bytes]."""

    report: dict
    max_rss: int
    stderr: str


def probe(bag: Path, extra_env: dict[str, str] | None = None) -> Outcome:
    """Open `bag` every public way in a child process; fail on a traceback, a hang or a memory peak."""
    out_file, err_file = bag.parent / f"{bag.name}.out", bag.parent / f"{bag.name}.err"
    # One BLAS thread: its per-thread buffers would count against the address-space limit.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **(extra_env or {})}
    try:
        returncode, max_rss = run_measured([sys.executable, "-c", PROBE, str(bag)], CHILD_ADDRESS_SPACE,
                                           CHILD_DEADLINE, REPO_ROOT, out_file, err_file, env=env)
    except TimeoutError:
        pytest.fail(f"{bag}: still running after {CHILD_DEADLINE} s (a hang)")
    errors = err_file.read_text()
    assert returncode == 0 and "Traceback" not in errors, f"{bag}: the child crashed:\n{errors}"
    report = json.loads(out_file.read_text())
    assert max_rss < MAX_RSS, f"{bag}: peak memory {max_rss / 2**20:.0f} MiB"
    assert report["seconds"] < MAX_SECONDS, f"{bag}: took {report['seconds']:.1f} s"
    return Outcome(report, max_rss, errors)


def assert_one_line_error(result: dict, *fragments: str) -> None:
    """A CLI run that failed with one line naming what `fragments` name, and no traceback."""
    assert result["rc"] != 0 and result["stdout"] == ""
    lines = result["stderr"].splitlines()
    assert len(lines) == 1, result["stderr"]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# ---------------------------------------------------------------------------- crafting MCAP
def _cdr_string(text: str) -> bytes:
    """A std_msgs/msg/String in CDR (little-endian encapsulation, length-prefixed NUL-terminated)."""
    raw = text.encode() + b"\0"
    return b"\x00\x01\x00\x00" + struct.pack("<I", len(raw)) + raw


def _real_mcap_records() -> list[McapRecord]:
    """The records of a real MCAP file the mcap library writes: N_MESSAGES strings in a zstd chunk."""
    stream = io.BytesIO()
    writer = McapWriter(stream, compression=CompressionType.ZSTD)
    writer.start(profile="ros2", library="test")
    schema = writer.register_schema("std_msgs/msg/String", "ros2msg", b"string data")
    channel = writer.register_channel("/chatter", "cdr", schema, {"offered_qos_profiles": ""})
    for i in range(N_MESSAGES):
        writer.add_message(channel, T0 + i, _cdr_string(f"hello {i}"), T0 + i, i)
    writer.finish()
    return list(StreamReader(io.BytesIO(stream.getvalue()), emit_chunks=True).records)


def _assemble(records: list[McapRecord], summary: bool = True,
              edit_index: Callable[[ChunkIndex], None] | None = None,
              summary_records: Callable[[RecordBuilder], None] | None = None,
              summary_start: int | None = None) -> bytes:
    """An MCAP file of the data records (header, chunks) of `records`, then optionally a summary
    (schemas, channels, a chunk index per chunk, statistics) and the footer. The hooks corrupt it:
    `edit_index` changes each chunk index, `summary_records` writes extra records into the summary,
    `summary_start` replaces the footer's summary offset."""
    builder = RecordBuilder()
    chunks = []
    for record in records:
        if isinstance(record, Header | Chunk):
            start = len(MAGIC) + builder.count
            record.write(builder)
            if isinstance(record, Chunk):
                chunks.append((record, start, len(MAGIC) + builder.count - start))
    DataEnd(0).write(builder)
    start_of_summary = 0
    if summary:
        start_of_summary = len(MAGIC) + builder.count
        for record in records:
            if isinstance(record, Schema | Channel):
                record.write(builder)
        if summary_records is not None:
            summary_records(builder)
        for chunk, start, length in chunks:
            index = ChunkIndex(
                chunk_length=length, chunk_start_offset=start, compression=chunk.compression,
                compressed_size=len(chunk.data), message_start_time=chunk.message_start_time,
                message_end_time=chunk.message_end_time, message_index_length=0, message_index_offsets={},
                uncompressed_size=chunk.uncompressed_size)
            if edit_index is not None:
                edit_index(index)
            index.write(builder)
        Statistics(message_count=N_MESSAGES, schema_count=1, channel_count=1, attachment_count=0, metadata_count=0,
                   chunk_count=len(chunks), message_start_time=T0, message_end_time=T0 + N_MESSAGES - 1,
                   channel_message_counts={1: N_MESSAGES}).write(builder)
    Footer(start_of_summary if summary_start is None else summary_start, 0, 0).write(builder)
    return MAGIC + builder.end() + MAGIC


def _with_chunk(records: list[McapRecord], edit: Callable[[Chunk], Chunk]) -> list[McapRecord]:
    return [edit(r) if isinstance(r, Chunk) else r for r in records]


def _zstd_of_zeros(size: int) -> bytes:
    """One zstd frame of `size` zero bytes [bytes], compressed 1 MiB at a time (400 MiB -> 13 KB)."""
    compressor = zstd.ZstdCompressor()
    block = bytes(2**20)
    parts = [compressor.compress(block) for _ in range(size // 2**20)]
    return b"".join(parts) + compressor.flush()


BOMB_SIZE = 400 * 2**20  # [bytes] what the bomb chunk expands to
CAP = 256 * 2**20  # [bytes] the most a chunk may declare or decompress to (MAX_DECOMPRESSED_BYTES)
CHUNK_AT = 33  # byte offset of the only chunk: magic (8) + header record (9 + 4 + 4 + 4 + 4)


def _bomb(honest: bool) -> Callable[[Chunk], Chunk]:
    """Chunk records replaced by 400 MiB of zeros; the chunk keeps its small declared size, or
    (honest) declares 400 MiB."""
    def edit(chunk: Chunk) -> Chunk:
        declared = BOMB_SIZE if honest else chunk.uncompressed_size
        return dataclasses.replace(chunk, data=_zstd_of_zeros(BOMB_SIZE), uncompressed_size=declared,
                                   uncompressed_crc=0)
    return edit


def _claim(**fields: int) -> Callable[[ChunkIndex], None]:
    """Set chunk index fields to what a hostile file claims."""
    def edit(index: ChunkIndex) -> None:
        for name, value in fields.items():
            setattr(index, name, value)
    return edit


def _schema_claiming(length: int) -> Callable[[RecordBuilder], None]:
    """Write a summary Schema record whose length field claims `length` bytes [bytes]."""
    def write(builder: RecordBuilder) -> None:
        own = RecordBuilder()
        Schema(id=9, name="x/msg/Y", encoding="ros2msg", data=b"").write(own)
        record = own.end()
        builder.write(record[:1] + struct.pack("<Q", length) + record[9:])
    return write


# case -> (the file, what its problem says)
MCAP_CASES: dict[str, tuple[Callable[[list[McapRecord]], bytes], tuple[str, ...]]] = {
    # A chunk that declares its real small size but decompresses to 400 MiB: via the summary and by scanning.
    "bomb_lying_summary": (lambda r: _assemble(_with_chunk(r, _bomb(honest=False)), summary=True),
                           (f"chunk at byte {CHUNK_AT} decompresses to more than the", "bytes it declares")),
    "bomb_lying_scanned": (lambda r: _assemble(_with_chunk(r, _bomb(honest=False)), summary=False),
                           (f"chunk at byte {CHUNK_AT} decompresses to more than the", "bytes it declares")),
    # ... and one that honestly declares 400 MiB: over the cap, refused before decompressing anything.
    "bomb_honest": (lambda r: _assemble(_with_chunk(r, _bomb(honest=True)), summary=False),
                    (f"declares {BOMB_SIZE} bytes decompressed, more than the {CAP} byte limit",)),
    "index_claims_8GiB_chunk": (lambda r: _assemble(r, edit_index=_claim(chunk_length=8 * 2**30)),
                                ("summary section unusable", f"claims {8 * 2**30} bytes, past the end of the data")),
    "index_claims_8GiB_uncompressed": (lambda r: _assemble(r, edit_index=_claim(uncompressed_size=8 * 2**30)),
                                       ("summary section unusable", f"{8 * 2**30} uncompressed, more than the")),
    # Length fields past the end of the file: the footer's summary offset, a summary record's length.
    "summary_start_past_eof": (lambda r: _assemble(r, summary_start=10**9),
                               ("summary section unusable", "the footer puts the summary at byte 1000000000")),
    "summary_record_claims_3GiB": (lambda r: _assemble(r, summary_records=_schema_claiming(3 * 2**30)),
                                   ("summary section unusable", f"claims {3 * 2**30} bytes")),
}


def _mcap_bag(tmp_path: Path, name: str, data: bytes) -> Path:
    """A bag folder (no metadata.yaml, as a recorder killed before closing leaves it) holding one MCAP file."""
    bag = tmp_path / name
    bag.mkdir()
    (bag / f"{name}_0.mcap").write_bytes(data)
    return bag


# ---------------------------------------------------------------------------- MCAP tests
def test_the_crafted_mcap_is_sound(tmp_path):
    # The control: the same assembly, uncorrupted, reads every message with no problem.
    records = _real_mcap_records()
    for summary in (True, False):
        path = tmp_path / f"ok_{summary}.mcap"
        path.write_bytes(_assemble(records, summary=summary))
        info = bag_info(path)
        assert info.message_count == N_MESSAGES and not info.problems


@pytest.mark.parametrize("case", sorted(MCAP_CASES))
def test_hostile_mcap_is_reported_and_bounded(tmp_path, case):
    craft, fragments = MCAP_CASES[case]
    bag = _mcap_bag(tmp_path, case, craft(_real_mcap_records()))
    file_name = f"{case}_0.mcap"
    outcome = probe(bag).report  # no traceback, < 300 MiB, < 5 s

    # As for any damage: a bad chunk is skipped and reported (the rest of the file still reads),
    # a summary that lies is not used and the records are scanned instead.
    assert outcome["error"] is None, outcome
    assert outcome["read"] == (0 if case.startswith("bomb") else N_MESSAGES)
    naming = [p for p in outcome["problems"] if file_name in p and all(f in p for f in fragments)]
    assert naming, (fragments, outcome["problems"])
    info = outcome["info"]
    assert info["rc"] == 0 and all(f in info["stdout"] for f in fragments) and file_name in info["stdout"]
    assert info["stderr"].count("\n") <= 1  # at most the one warning line of a skipped chunk
    assert outcome["repair"]["rc"] == 0 and "metadata.yaml rebuilt" in outcome["repair"]["stdout"]


@pytest.mark.parametrize("cut", ["inside_the_chunk", "inside_the_summary", "inside_the_magic"])
def test_truncated_mcap_reads_what_is_complete_or_names_the_file(tmp_path, cut):
    data = _assemble(_real_mcap_records())
    (summary_start,) = struct.unpack_from("<Q", data, len(data) - len(MAGIC) - 20)
    keep = {"inside_the_chunk": CHUNK_AT + 40, "inside_the_summary": summary_start + 20, "inside_the_magic": 5}[cut]
    bag = _mcap_bag(tmp_path, cut, data[:keep])
    file_name = f"{cut}_0.mcap"
    outcome = probe(bag).report
    if cut == "inside_the_magic":
        assert file_name in outcome["error"] and "not an MCAP file" in outcome["error"]
        assert_one_line_error(outcome["info"], file_name, "not an MCAP file")
        assert_one_line_error(outcome["repair"], file_name, "not an MCAP file")
        return
    # A recording cut short is read as far as it goes (what a crash leaves), and says so.
    assert outcome["error"] is None
    assert outcome["read"] == (0 if cut == "inside_the_chunk" else N_MESSAGES)
    assert any(file_name in p and "truncated at byte" in p for p in outcome["problems"]), outcome["problems"]
    assert outcome["info"]["rc"] == 0 and "truncated at byte" in outcome["info"]["stdout"]
    assert outcome["repair"]["rc"] == 0


# ---------------------------------------------------------------------------- metadata.yaml
def _written_bag(tmp_path: Path, storage: str = "mcap") -> Path:
    """A real bag (metadata.yaml and one storage file) written by the project's BagWriter."""
    bag = tmp_path / f"bag_{storage}"
    with BagWriter(bag, storage=storage) as writer:
        writer.add_topic("/chatter", "std_msgs/msg/String")
        for i in range(N_MESSAGES):
            writer.write("/chatter", T0 + i, _cdr_string(f"hello {i}"))
    return bag


def _billion_laughs() -> str:
    """~700 bytes of YAML whose aliases expand to 9**10 strings when the document is walked."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def _edit_metadata(case: str) -> Callable[[str], str]:
    """How each case damages the text of a good metadata.yaml."""
    edits: dict[str, Callable[[str], str]] = {
        "message_count_abc": lambda t: t.replace(f"  message_count: {N_MESSAGES}\n", "  message_count: abc\n", 1),
        "topic_message_count_abc": lambda t: t.replace(f"    message_count: {N_MESSAGES}\n",
                                                      "    message_count: abc\n", 1),
        "message_count_negative": lambda t: t.replace(f"  message_count: {N_MESSAGES}\n",
                                                     "  message_count: -5\n", 1),
        # The bomb expands inside a topic name, as a reviewer's 542-byte file did.
        "alias_bomb": lambda t: _billion_laughs() + t.replace("name: /chatter", "name: *l9", 1),
        "deep_nesting": lambda t: t.replace("  custom_data: {}\n", "  custom_data: " + "[" * 50_000 + "]" * 50_000
                                            + "\n", 1),
        "oversized": lambda t: t + "# padding\n" * (5 * 2**20 // 10),
        "file_outside_the_bag": lambda t: t.replace("- bag_mcap_0.mcap", "- ../elsewhere/other_0.mcap"),
    }
    return edits[case]


METADATA_ERRORS = {
    "message_count_abc": "field 'message_count' = 'abc' is not a message count",
    "topic_message_count_abc": "field 'topics_with_message_count[0].message_count' = 'abc' is not a message count",
    "message_count_negative": "field 'message_count' = -5 is not a message count",
    "alias_bomb": "YAML anchors and aliases are not allowed",
    "deep_nesting": "unreadable metadata",
    "oversized": "more than the 4194304 bytes a metadata.yaml may have",
    "file_outside_the_bag": "lists '../elsewhere/other_0.mcap', outside the bag folder",
}


@pytest.mark.parametrize("case", sorted(METADATA_ERRORS))
def test_hostile_metadata_is_a_bag_error_naming_the_file(tmp_path, case):
    bag = _written_bag(tmp_path)
    meta = bag / "metadata.yaml"
    text = meta.read_text()
    damaged = _edit_metadata(case)(text)
    assert damaged != text  # the edit found its target
    meta.write_text(damaged)
    if case == "file_outside_the_bag":  # a real bag file there, which must not be read through this bag
        (tmp_path / "elsewhere").mkdir()
        shutil.copy(bag / "bag_mcap_0.mcap", tmp_path / "elsewhere" / "other_0.mcap")

    outcome = probe(bag).report
    assert str(meta) in outcome["error"] and METADATA_ERRORS[case] in outcome["error"], outcome["error"]
    assert_one_line_error(outcome["info"], str(meta), METADATA_ERRORS[case])
    # repair does not trust metadata.yaml: it rebuilds it from the files and keeps the bad one.
    assert outcome["repair"]["rc"] == 0 and "metadata.yaml rebuilt" in outcome["repair"]["stdout"]
    assert (bag / "metadata.yaml.bak").read_text() == damaged
    assert bag_info(bag).message_count == N_MESSAGES


# ---------------------------------------------------------------------------- sqlite3
def test_info_on_a_writable_wal_mode_sqlite_bag_leaves_no_files_behind(tmp_path, capsys):
    bag = _written_bag(tmp_path, storage="sqlite3")
    db = bag / "bag_sqlite3_0.db3"
    # rosbag2's own bags are in WAL mode (its test bag is); SQLite creates -wal/-shm beside such a
    # file on every open, mode=ro included, and a reader cannot remove them again.
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    connection.close()
    before = sorted(p.name for p in bag.iterdir())
    assert before == ["bag_sqlite3_0.db3", "metadata.yaml"]

    assert cli_main(["bag", "info", str(bag)]) == 0
    assert "count: 3" in capsys.readouterr().out
    assert bag_info(bag).message_count == N_MESSAGES
    assert sorted(p.name for p in bag.iterdir()) == before


# ---------------------------------------------------------------------------- compressed messages
def test_message_compressed_bomb_is_skipped_without_decompressing(tmp_path):
    # rosbag2 `compression_mode: message`: each message is its own zstd frame. One frame states
    # 400 MiB of content in its header: refused from the header, the other messages still read.
    bomb = zstd.ZstdCompressor()
    bomb.set_pledged_input_size(BOMB_SIZE)
    block = bytes(2**20)
    bomb_frame = b"".join(bomb.compress(block) for _ in range(BOMB_SIZE // 2**20)) + bomb.flush()
    bag = tmp_path / "message_compressed"
    with BagWriter(bag, storage="sqlite3") as writer:
        writer.add_topic("/chatter", "std_msgs/msg/String")
        writer.write("/chatter", T0, zstd.compress(_cdr_string("hello 0")))
        writer.write("/chatter", T0 + 1, bomb_frame)
        writer.write("/chatter", T0 + 2, zstd.compress(_cdr_string("hello 2")))
    meta = bag / "metadata.yaml"
    text = meta.read_text()
    compressed = text.replace("compression_format: ''", "compression_format: zstd").replace(
        "compression_mode: ''", "compression_mode: message")
    assert compressed.count("zstd") == 1 and "message\n" in compressed
    meta.write_text(compressed)

    outcome = probe(bag).report
    assert outcome["error"] is None and outcome["read"] == 2
    assert outcome["info"]["rc"] == 0


def test_bounded_decompression_refuses_what_passes_the_declared_size_or_the_cap():
    from backports.zstd import ZstdError
    from lz4.frame import compress as lz4_compress

    from sim2real_ros.bags.storage import SizeError, lz4_decompress_bounded, zstd_decompress_bounded

    data = bytes(range(256)) * 40  # 10240 bytes
    for compress, decompress in ((zstd.compress, zstd_decompress_bounded), (lz4_compress, lz4_decompress_bounded)):
        frame = compress(data)
        assert decompress(frame, len(data)) == data
        with pytest.raises(SizeError, match="more than the 10239 bytes it declares"):
            decompress(frame, len(data) - 1)
        with pytest.raises(SizeError, match="decompresses to 10240 bytes, not the 10241 it declares"):
            decompress(frame, len(data) + 1)
        with pytest.raises(SizeError, match="declares 10240 bytes decompressed, more than the 1000 byte limit"):
            decompress(frame, len(data), cap=1000)
        with pytest.raises((SizeError, ZstdError, RuntimeError)):
            decompress(frame[:len(frame) // 2], len(data))  # cut short
    # A frame that does not state its size: cut off at the cap, never decompressed whole.
    streamed = zstd.ZstdCompressor()
    frame = streamed.compress(data) + streamed.flush()
    assert zstd.get_frame_info(frame[:18]).decompressed_size is None
    with pytest.raises(SizeError, match="more than the 1000 byte limit"):
        zstd_decompress_bounded(frame, None, cap=1000)
    assert zstd_decompress_bounded(frame, None) == data


def test_repair_that_cannot_write_names_the_file(tmp_path, capsys):
    # A write that fails (here a folder where repair writes the new metadata.yaml; a read-only
    # folder or a full disk alike) is one line naming the file, not a traceback.
    bag = _written_bag(tmp_path)
    meta = bag / "metadata.yaml"
    meta.write_text(_edit_metadata("message_count_abc")(meta.read_text()))
    (bag / "metadata.yaml.tmp").mkdir()
    assert cli_main(["bag", "repair", str(bag)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line_error({"rc": 1, "stdout": "", "stderr": captured.err}, str(bag / "metadata.yaml.tmp"),
                          "cannot repair")


# ---------------------------------------------------------------------------- links in a bag folder
# Bags travel as tarballs, which keep symbolic links. Each case puts a link where repair writes or
# reads (a temp file, a backup, metadata.yaml, a storage file), pointing outside the bag.
def _unclosed_mcap_bag(tmp_path: Path) -> Path:
    """A bag whose recorder was killed: one MCAP file without a summary, no metadata.yaml."""
    return _mcap_bag(tmp_path, "unclosed", _assemble(_real_mcap_records(), summary=False))


def _bag_with_bad_metadata(tmp_path: Path) -> Path:
    bag = _written_bag(tmp_path)
    meta = bag / "metadata.yaml"
    meta.write_text(_edit_metadata("message_count_abc")(meta.read_text()))
    return bag


# link name in the bag -> (the bag, what the link points at: a victim text file or the bag's own file moved out)
LINK_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "metadata.yaml.bak": (_bag_with_bad_metadata, "victim"),
    "metadata.yaml.tmp": (_bag_with_bad_metadata, "victim"),
    "metadata.yaml": (_bag_with_bad_metadata, "moved"),
    "bag_mcap_0.mcap": (_bag_with_bad_metadata, "moved"),
    "unclosed_0.mcap.repairing": (_unclosed_mcap_bag, "victim"),
    "unclosed_0.mcap.damaged": (_unclosed_mcap_bag, "victim"),
    "unclosed_0.mcap": (_unclosed_mcap_bag, "moved"),
}


@pytest.mark.parametrize("link", sorted(LINK_CASES))
def test_a_bag_folder_holding_a_link_is_refused_by_name_and_nothing_outside_changes(tmp_path, capsys, link):
    make_bag, target_kind = LINK_CASES[link]
    bag = make_bag(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "target"
    if target_kind == "moved":  # the bag's own file, moved out and linked back in
        (bag / link).rename(target)
    else:
        target.write_text("precious: what the link points at\n")
    (bag / link).symlink_to(target)
    target_before = target.read_bytes()
    bag_before = sorted(p.name for p in bag.iterdir())

    for action in ("repair", "info"):
        assert cli_main(["bag", action, str(bag)]) == 1, action
        captured = capsys.readouterr()
        assert_one_line_error({"rc": 1, "stdout": captured.out, "stderr": captured.err},
                              str(bag), "symbolic link", link)
    assert target.read_bytes() == target_before  # the old repair wrote the new metadata or MCAP here
    assert sorted(p.name for p in bag.iterdir()) == bag_before  # nothing written into the bag either
    assert sorted(p.name for p in outside.iterdir()) == ["target"]


def test_write_metadata_replaces_a_link_at_its_temp_name_without_writing_through_it(tmp_path):
    # The writer's and repair's metadata.yaml goes through metadata.yaml.tmp: even a link that
    # appears there after the folder was checked is removed, not followed.
    from sim2real_ros.bags.metadata import metadata_document, write_metadata

    bag = _written_bag(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (bag / "metadata.yaml.tmp").symlink_to(victim)
    write_metadata(bag, metadata_document("mcap", [], [], "kilted"))
    assert victim.read_text() == "precious\n"
    meta = bag / "metadata.yaml"
    assert not meta.is_symlink() and "rosbag2_bagfile_information" in meta.read_text()
    assert not (bag / "metadata.yaml.tmp").exists() and not (bag / "metadata.yaml.tmp").is_symlink()


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_bag_writer_refuses_a_dangling_link_at_its_path(tmp_path, storage):
    from sim2real_ros.core.errors import BagError

    elsewhere = tmp_path / "elsewhere"
    out = tmp_path / "new_bag"
    out.symlink_to(elsewhere)  # dangling: exists() is False, yet the name is taken
    with pytest.raises(BagError, match="exists already"):
        BagWriter(out, storage=storage)
    assert not elsewhere.exists()


def test_repair_never_overwrites_an_earlier_backup(tmp_path, capsys):
    bag = _written_bag(tmp_path)
    meta = bag / "metadata.yaml"
    texts = []
    for count in ("abc", "-5"):  # damaged twice, repaired twice
        text = meta.read_text().replace(f"  message_count: {N_MESSAGES}\n", f"  message_count: {count}\n", 1)
        assert text != meta.read_text()
        meta.write_text(text)
        texts.append(text)
        assert cli_main(["bag", "repair", str(bag)]) == 0
    assert "metadata.yaml.bak.2" in capsys.readouterr().out
    assert [(bag / name).read_text() for name in ("metadata.yaml.bak", "metadata.yaml.bak.2")] == texts
    assert bag_info(bag).message_count == N_MESSAGES and not bag_info(bag).problems


# ---------------------------------------------------------------------------- compressed bags
def _streamed_zstd(*parts: bytes, zeros: int = 0) -> bytes:
    """One zstd frame of `parts` then `zeros` zero bytes, compressed 1 MiB at a time (the frame
    header states no size, as a streaming compressor writes it)."""
    compressor = zstd.ZstdCompressor()
    out = [compressor.compress(part) for part in parts]
    out += [compressor.compress(bytes(min(2**20, zeros - i))) for i in range(0, zeros, 2**20)]
    return b"".join(out) + compressor.flush()


def _file_compressed_bag(tmp_path: Path, storage: str, name: str = "", zeros: int = 0,
                         content: Callable[[bytes], bytes] | None = None) -> tuple[Path, str]:
    """A real bag written by BagWriter, its storage file replaced by `<file>.zstd` as rosbag2's
    `compression_mode: file` writes it; `zeros` zero bytes appended inside the compressed stream
    (a bomb), or the content replaced by `content(original)`. Returns (bag, compressed file name)."""
    bag = tmp_path / (name or f"file_compressed_{storage}")
    with BagWriter(bag, storage=storage) as writer:
        writer.add_topic("/chatter", "std_msgs/msg/String")
        for i in range(N_MESSAGES):
            writer.write("/chatter", T0 + i, _cdr_string(f"hello {i}"))
    plain = writer.file_paths[0]
    data = plain.read_bytes() if content is None else content(plain.read_bytes())
    compressed_name = plain.name + ".zstd"
    (bag / compressed_name).write_bytes(_streamed_zstd(data, zeros=zeros))
    plain.unlink()
    meta = bag / "metadata.yaml"
    meta.write_text(meta.read_text().replace(plain.name, compressed_name).replace(
        "compression_format: ''", "compression_format: zstd").replace("compression_mode: ''", "compression_mode: file"))
    return bag, compressed_name


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_file_compressed_bag_reads_and_leaves_no_temp_file(tmp_path, monkeypatch, storage):
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    bag, compressed_name = _file_compressed_bag(tmp_path, storage)
    from sim2real_ros.bags import BagReader

    with BagReader(bag) as reader:
        # The inflated copy has no name on disk while it is read (MCAP: an anonymous temp file;
        # sqlite3: unlinked once SQLite holds it open), so a killed process leaves nothing.
        assert [p for p in private_tmp.rglob("*") if p.is_file()] == []
        assert [m.msg.data for m in reader.messages()] == [f"hello {i}" for i in range(N_MESSAGES)]
        assert [p.name for p in reader.files] == [compressed_name]  # messages name the bag's file
    assert list(private_tmp.iterdir()) == []


INFLATE_CAP_MIB = 4  # [MiB] SIM2REAL_BAG_INFLATE_MAX_MIB in the bomb tests: small, so they write little


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_file_compressed_bomb_stops_at_its_cap_naming_file_and_limit(tmp_path, storage):
    # A few KB that inflate to 64 MiB (the reviewer's 65 KB inflated to 2.1 GB): stopped at the cap.
    bag, compressed_name = _file_compressed_bag(tmp_path, storage, zeros=64 * 2**20)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    assert (bag / compressed_name).stat().st_size < 16_000
    outcome = probe(bag, {"SIM2REAL_BAG_INFLATE_MAX_MIB": str(INFLATE_CAP_MIB), "TMPDIR": str(private_tmp)}).report
    cap = INFLATE_CAP_MIB * 2**20
    fragments = (str(bag / compressed_name), f"inflates to more than {cap} bytes", "SIM2REAL_BAG_INFLATE_MAX_MIB")
    assert outcome["error"] is not None and all(f in outcome["error"] for f in fragments), outcome["error"]
    assert_one_line_error(outcome["info"], *fragments)
    assert_one_line_error(outcome["repair"], *fragments)
    assert list(private_tmp.iterdir()) == []  # nothing left behind


def test_file_compressed_bag_that_is_not_mcap_stops_after_the_first_block(tmp_path):
    # 256 MiB of zeros named .mcap.zstd: refused at the magic bytes of the first inflated block,
    # under the default limits, before anything is written.
    bag, compressed_name = _file_compressed_bag(tmp_path, "mcap", name="not_mcap", zeros=256 * 2**20,
                                                content=lambda _original: b"")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    outcome = probe(bag, {"TMPDIR": str(private_tmp)}).report
    fragments = (str(bag / compressed_name), "does not inflate to a MCAP file", "starts with b'\\x00")
    assert outcome["error"] is not None and all(f in outcome["error"] for f in fragments), outcome["error"]
    assert_one_line_error(outcome["info"], *fragments)
    assert list(private_tmp.iterdir()) == []


def test_inflate_limits_default_scale_with_the_compressed_size_and_read_the_environment():
    from sim2real_ros.bags.storage import InflateLimits
    from sim2real_ros.core.errors import BagError

    limits = InflateLimits()
    assert limits.budget(65_000) == 256 * 2**20  # the reviewer's 65 KB bomb: 256 MiB, not 2.1 GB
    assert limits.budget(3 * 10**6) == 300 * 10**6  # 3 MB: 300 MB, not 100 GB
    assert limits.budget(10**12) == 64 * 2**30  # never more than 64 GiB
    configured = InflateLimits.from_env({"SIM2REAL_BAG_INFLATE_RATIO": "10", "SIM2REAL_BAG_INFLATE_MAX_MIB": "2"})
    assert configured.budget(10**9) == 2 * 2**20 and configured.budget(1000) == 2 * 2**20
    with pytest.raises(BagError, match="SIM2REAL_BAG_INFLATE_RATIO='-1'"):
        InflateLimits.from_env({"SIM2REAL_BAG_INFLATE_RATIO": "-1"})
    with pytest.raises(BagError, match="SIM2REAL_BAG_INFLATE_MAX_MIB='lots'"):
        InflateLimits.from_env({"SIM2REAL_BAG_INFLATE_MAX_MIB": "lots"})


def test_message_compressed_bag_has_a_total_budget_not_only_one_per_message(tmp_path):
    # 40 messages of 1 MiB each, every one under the per-message cap (256 MiB), each frame ~100
    # bytes: 40 MiB from 4 KB. With a 4 MiB budget the read stops after 4 of them, naming the bag.
    bag = tmp_path / "message_compressed_budget"
    message = _cdr_string("a" * (2**20 - 16))
    with BagWriter(bag, storage="sqlite3") as writer:
        writer.add_topic("/chatter", "std_msgs/msg/String")
        for i in range(40):
            writer.write("/chatter", T0 + i, _streamed_zstd(message))
    meta = bag / "metadata.yaml"
    meta.write_text(meta.read_text().replace("compression_format: ''", "compression_format: zstd").replace(
        "compression_mode: ''", "compression_mode: message"))
    outcome = probe(bag, {"SIM2REAL_BAG_INFLATE_MAX_MIB": str(INFLATE_CAP_MIB)}).report
    fragments = (str(bag), f"inflate to more than {INFLATE_CAP_MIB * 2**20} bytes in all",
                 "SIM2REAL_BAG_INFLATE_MAX_MIB")
    assert outcome["error"] is not None and all(f in outcome["error"] for f in fragments), outcome["error"]
    # Under the default budget the same bag reads whole.
    from sim2real_ros.bags import BagReader

    with BagReader(bag) as reader:
        assert sum(1 for _ in reader.messages()) == 40


def test_sigterm_while_inflating_leaves_no_temp_file(tmp_path):
    # sqlite3 needs a named copy while it inflates: `sim2real bag info` stopped by SIGTERM (a
    # closed session, `kill`) mid-way removes it on the way out (the old reader left it in /tmp).
    bag, _ = _file_compressed_bag(tmp_path, "sqlite3", zeros=240 * 2**20)  # inflates for ~0.1-1 s
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(private_tmp), "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-m", "sim2real_ros.cli.main", "bag", "info", str(bag)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + CHILD_DEADLINE
        # Only our own temp entries count: a library the child imports may leave one of its own
        # (a Jazzy run once found "uypj_e7a" there, which then stopped the child before inflating).
        while not any(p.is_file() for p in private_tmp.rglob("sim2real_bag_*/*")):  # the copy exists: inflating
            assert child.poll() is None and time.monotonic() < deadline, "never saw the inflated copy"
            time.sleep(0.001)
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=CHILD_DEADLINE)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 128 + signal.SIGTERM and b"Traceback" not in stderr, stderr
    assert list(private_tmp.glob("sim2real_bag_*")) == []


def test_dataset_export_refuses_a_dangling_link_at_its_output(tmp_path):
    from sim2real_ros.datasets.lerobot import DatasetError
    from sim2real_ros.datasets.lerobot_export import export_bag

    elsewhere = tmp_path / "elsewhere"
    out = tmp_path / "dataset"
    out.symlink_to(elsewhere)
    with pytest.raises(DatasetError, match="exists already"):
        export_bag(_written_bag(tmp_path), out, progress=False)
    assert not elsewhere.exists()
