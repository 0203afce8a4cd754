"""bench/security_probe.py without a server: `--only` picks checks, the serverless ones run alone, a skipped
check does not fail the run, and the hostile files each say whether a correct reader takes them."""
from __future__ import annotations

import json

import pytest

from bench import security_files, security_probe


def test_only_names_checks_and_refuses_an_unknown_one(capsys):
    assert security_probe.selected("sessions, readyz") == ["readyz", "sessions"]
    assert security_probe.selected(None) == list(security_probe.CHECKS)
    with pytest.raises(SystemExit) as stopped:
        security_probe.main(["--only", "readyz,nope"])
    assert stopped.value.code == 2 and "no check nope" in capsys.readouterr().err


def test_serverless_checks_run_alone_and_a_skipped_one_does_not_fail(tmp_path):
    out = tmp_path / "probe"
    code = security_probe.main(["--only", "session_cap,proxy_cookie", "--cap-flood", "30", "--out", str(out),
                                "--workdir", str(tmp_path / "work")])
    report = json.loads(out.with_suffix(".json").read_text())
    assert code == 0 and list(report["checks"]) == [security_probe.CHECKS["session_cap"],
                                                    security_probe.CHECKS["proxy_cookie"]]
    cap = report["checks"][security_probe.CHECKS["session_cap"]]
    assert cap["ok"] is True and cap["table"][0]["kb_b_still_valid"] == "100/100"
    assert report["checks"][security_probe.CHECKS["proxy_cookie"]] == {"skipped": "run with --nginx", "ok": None}
    md = out.with_suffix(".md").read_text()
    assert "| console cookie behind nginx | proxy_cookie | skipped |" in md and "## session cap" in md
    assert not (tmp_path / "work" / "data").exists()  # no KBs built, no server started


def test_hostile_files_cover_the_archives_and_keep_valid_controls():
    files = security_files.hostile_files(n_random=2, seed=7)
    assert set(security_files.HOSTILE_ARCHIVES) <= {name for name, (_, valid) in files.items() if not valid}
    assert {name for name, (_, valid) in files.items() if valid} == {
        "csv-bare-cr-line-ends.csv", "csv-formula-cells.csv", "jsonl-bom-crlf-valid.jsonl", "control-valid.csv"}
    assert files["random-bytes-1.csv"][0]() == security_files.hostile_files(2, 7)["random-bytes-1.csv"][0]()


def test_a_file_row_is_judged_by_every_path():
    refused = {"file": "x.csv", "bytes": 10, "valid": False, "reader": {"outcome": "KbFormatError"},
               "cli": {"exit": 2, "kb_created": False, "traceback": False},
               "console": {"status": 422, "seconds": 0.1, "peak_rss_growth_mb": 0.0}}
    assert security_files.file_ok(refused)
    assert not security_files.file_ok({**refused, "cli": {**refused["cli"], "kb_created": True}})
    assert not security_files.file_ok({**refused, "console": {**refused["console"], "seconds": 9.6}})
    big = {**refused, "bytes": security_files.BOUNDED_BYTES + 1, "console": {"status": 0, "seconds": 30}}
    assert security_files.file_ok(big)  # too big to bound in time: only no 5xx and no import
