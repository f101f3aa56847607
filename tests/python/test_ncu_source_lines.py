"""scripts/ncu_source_lines.py without a GPU or a profiler: readelf's line table and ncu's SASS
CSV parsed from made-up text, and the samples summed per source line and per call site."""

import importlib.util
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ncu_source_lines.py"
spec = importlib.util.spec_from_file_location("ncu_source_lines", SCRIPT)
lines = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lines)

# The shape of `readelf --debug-dump=decodedline` on a -lineinfo cubin: a header per file, rows
# of (file, line, address), NVIDIA's inlining opcodes as "UNKNOWN" rows in between.
READELF = """Contents of the .debug_line section:

/src/fmha/bwd_sm90.h:
File name                            Line number    Starting address    View    Stmt
UNKNOWN (144): length 2
bwd_sm90.h                                   700                   0               x
bwd_sm90.h                                   701                0x20               x

/src/tile/wgmma.h:
wgmma.h                                       56                0x30       1       x

/src/fmha/bwd_sm90.h:
bwd_sm90.h                                   766                0x50               x
"""

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)",'
          '"Warp Stall Sampling (Not-issued Samples)","stall_lg","stall_wait",'
          '"stall_lg (Not Issued)"')


def sass_csv(rows):
    body = [f'"{0x7F00 + offset:#x}","{source}","{samples}","0","{lg}","{wait}","0"'
            for offset, source, samples, lg, wait in rows]
    return "\n".join(['"Kernel Name","tilefmha_bwd_dq_dk_dv_made_up"', HEADER] + body)


CSV = sass_csv([(0x00, "IMAD R1, R2, R3", 5, 0, 5),
                (0x10, "ISETP.GE.AND P0", 1, 0, 1),
                (0x30, "HGMMA.64x64x16.F32.BF16", 40, 0, 30),
                (0x40, "WARPGROUP.DEPBAR.LE gsb0", 10, 0, 10),
                (0x50, "STG.E desc[UR4][R2.64], R5", 60, 50, 0),
                (0x60, "EXIT", 2, 0, 0)])


def test_cache_entries_lose_their_header_plain_elves_do_not():
    elf = b"\x7fELF" + bytes(100)
    assert lines.elf_bytes(lines.CACHE_MAGIC + bytes(56) + elf) == elf
    assert lines.elf_bytes(elf) == elf


def test_line_table_rows_are_file_line_address():
    table = lines.parse_line_table(READELF)
    assert table == [(0x0, "bwd_sm90.h", 700), (0x20, "bwd_sm90.h", 701),
                     (0x30, "wgmma.h", 56), (0x50, "bwd_sm90.h", 766)]


def test_sass_rows_are_offsets_from_the_first_instruction():
    rows = lines.parse_sass_csv(CSV)
    assert [offset for offset, *_ in rows] == [0x0, 0x10, 0x30, 0x40, 0x50, 0x60]
    assert rows[4][1:] == ("STG.E desc[UR4][R2.64], R5", 60, {"lg": 50})
    assert rows[0][3] == {"wait": 5}


def test_samples_go_to_the_innermost_line_and_to_the_call_site():
    table = lines.LineTable(lines.parse_line_table(READELF))
    total, by_line, by_context, reasons = lines.attribute(lines.parse_sass_csv(CSV), table,
                                                          "bwd_sm90.h")
    assert total == 118
    assert by_line[("bwd_sm90.h", 700)] == 6
    assert by_line[("wgmma.h", 56)] == 50  # the HGMMA and the wait after it
    assert by_line[("bwd_sm90.h", 766)] == 62
    # The inlined wgmma.h lines belong to the call site at bwd_sm90.h:701.
    assert by_context[701] == 50 and by_context[766] == 62
    assert reasons[766]["lg"] == 50


def test_an_address_range_keeps_one_roles_code():
    table = lines.LineTable(lines.parse_line_table(READELF))
    total, by_line, _, _ = lines.attribute(lines.parse_sass_csv(CSV), table, None, 0x30, 0x50)
    assert total == 50 and set(by_line) == {("wgmma.h", 56)}
    assert lines.parse_range("0x30-0x50") == (0x30, 0x50)


def test_a_cubin_without_a_line_table_is_a_clear_error(tmp_path, capsys):
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) not installed")
    cubin = tmp_path / "plain.cubin"
    cubin.write_bytes(b"not an elf")
    csv_path = tmp_path / "sass.csv"
    csv_path.write_text(CSV)
    assert lines.main([str(csv_path), str(cubin)]) == 2
    assert "no line table" in capsys.readouterr().err
