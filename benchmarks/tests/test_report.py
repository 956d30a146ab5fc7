import json

from bench import report
from bench.machine import machine_info


def test_md_table_escapes_pipes():
    text = report.md_table(["a", "b"], [["x|y", 1]])
    assert text.splitlines()[0] == "| a | b |"
    assert "x\\|y" in text


def test_write_json_turns_nan_into_null(tmp_path):
    path = report.write_json(tmp_path / "r.json", {"v": float("nan"), "w": [float("inf"), 1.0]})
    assert json.loads(path.read_text()) == {"v": None, "w": [None, 1.0]}


def test_envelope_and_markdown_carry_the_machine(tmp_path):
    machine = machine_info()
    assert machine["cpu_model"]
    assert machine["versions"]["python"]
    data = report.envelope("x", machine=machine, config={}, results=[], duration_s=1.234, quick=True)
    assert data["schema"] == report.SCHEMA
    assert data["duration_s"] == 1.23
    md = report.write_markdown(tmp_path / "x.md", "X", "body", data).read_text()
    assert md.startswith("# X")
    assert machine["cpu_model"] in md
    assert "quick smoke run" in md


def test_fmt_bytes():
    assert report.fmt_bytes(None) == "-"
    assert report.fmt_bytes(512) == "512 B"
    assert report.fmt_bytes(3 * 2**20) == "3.00 MiB"
