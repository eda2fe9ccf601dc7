"""Write faults and outages are recognised in the errors real libraries raise (a write to /dev/full, SQLite on a
full disk, a refused connection), stop with their exit code and paragraph, and the libraries' records stay off
the terminal once a fault was seen. Whole studies: tests/e2e/test_full_disk.py, tests/e2e/test_outages.py."""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path

import pytest
import sqlalchemy

from sptune.errors import StudyStopped
from sptune.study.faults import LIBRARY_LOG, LibraryLog, fault_in, fault_in_text, stopped
from sptune.study.interrupts import fault_paragraph, stop_signals


def _enospc() -> OSError:
    try:
        with open("/dev/full", "w") as f:  # Linux: every write fails with ENOSPC
            f.write("x")
            f.flush()
    except OSError as err:
        return err
    pytest.skip("/dev/full is not there")


def test_a_full_disk_behind_a_library_error_is_a_write_fault():
    err = _enospc()
    assert err.errno == errno.ENOSPC
    try:
        try:
            raise err
        except OSError as inner:
            raise RuntimeError("The Ray Tune run failed.") from inner  # how Tune wraps its loop's error
    except RuntimeError as outer:
        fault = fault_in(outer, {"": "/data/out"})
    assert fault is not None and fault.kind == "write" and fault.where == "/data/out"  # the write named no file
    assert "no space left on device" in fault.error


def test_sqlites_full_disk_names_the_store_it_came_from(tmp_path):
    db = tmp_path / "mlflow.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE metrics (v BLOB)")
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
    with pytest.raises(sqlalchemy.exc.OperationalError) as full, engine.begin() as conn:
        conn.exec_driver_sql(f"PRAGMA max_page_count = {pages + 1}")  # the disk holds one page more
        for _ in range(100):
            conn.exec_driver_sql("INSERT INTO metrics VALUES (?)", (b"x" * 4096,))
    engine.dispose()
    fault = fault_in(full.value, {"metrics": f"sqlite:///{db}", "": str(tmp_path)})
    assert fault is not None and fault.kind == "write" and fault.where == f"sqlite:///{db}"
    assert "the disk is full" in fault.error


def test_a_refused_connection_is_an_outage_and_other_errors_are_neither():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    engine = sqlalchemy.create_engine(f"postgresql://u@127.0.0.1:{port}/db")
    with pytest.raises(sqlalchemy.exc.OperationalError) as refused:
        engine.connect()
    fault = fault_in(refused.value, {"psycopg": "postgresql://u@127.0.0.1/db"})
    assert fault is not None and fault.kind == "service" and fault.where == "postgresql://u@127.0.0.1/db"
    assert fault_in(ValueError("a bug")) is None and fault_in(FileNotFoundError(2, "gone", "/x/y")) is None


def test_a_trials_error_text_names_its_path():
    text = "OSError: [Errno 28] No space left on device: '/data/out/ray_results/study/t1/checkpoint_000002'"
    fault = fault_in_text(text)
    assert fault is not None and fault.where == "/data/out/ray_results/study/t1/checkpoint_000002"
    assert fault_in_text("ValueError: nan loss") is None


def test_the_paragraph_names_the_path_the_error_the_log_and_the_resume(tmp_path):
    stop = StudyStopped("write", "/data/out/mlflow.db", "the disk is full (OperationalError: database or disk is full)")
    with stop_signals(tmp_path):
        text = fault_paragraph(stop, ["spec.yaml", "--output", str(tmp_path)], tmp_path / LIBRARY_LOG)
    assert stop.exit_code == 74 and StudyStopped("service", "x", "y").exit_code == 75
    assert text.startswith(
        "sptune: stopped before the study's first stage started: a write failed: /data/out/mlflow.db"
    )
    assert f"tracebacks are in {tmp_path / LIBRARY_LOG}" in text and "Free space there" in text
    assert text.endswith(f"python -m sptune.sweep spec.yaml --output {tmp_path} --resume  (exit status 74)")
    assert len(text.splitlines()) == 1


def test_library_records_reach_the_log_and_leave_the_terminal_once_a_fault_is_seen(tmp_path, capsys):
    terminal = logging.StreamHandler()  # what Ray installs on its logger
    ray_log = logging.getLogger("ray")
    ray_log.addHandler(terminal)
    log = LibraryLog(tmp_path)
    log.stores = {"": "/data/out"}
    try:
        with log.kept():
            ray_log.warning("before the fault")
            try:
                raise _enospc()
            except OSError:
                ray_log.exception("Experiment state snapshotting failed")
            ray_log.error("Trial task failed: Traceback ...")
    finally:
        ray_log.removeHandler(terminal)
    err = capsys.readouterr().err
    assert "before the fault" in err and "snapshotting failed" not in err and "Trial task failed" not in err
    kept = (tmp_path / LIBRARY_LOG).read_text()
    assert "snapshotting failed" in kept and "Traceback" in kept and "Trial task failed" in kept
    assert log.fault is not None and log.fault.where == "/data/out"
    assert stopped(RuntimeError("Tune failed"), log).exit_code == 74  # the error raised later names no cause


def test_the_log_moves_to_the_temporary_folder_when_the_output_folder_refuses_it(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / LIBRARY_LOG).mkdir()  # a write there fails, as on a full disk
    log = LibraryLog(out)
    with log.kept():
        logging.getLogger("ray").error("kept somewhere")
    assert log.path.parent == tmp_path / "tmp" and "kept somewhere" in log.path.read_text()
    assert Path(log.path).name.endswith(LIBRARY_LOG)
