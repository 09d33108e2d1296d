"""Outputs of fit, diagnose, calibrate and profile that went wrong without a word: an output over one of the
command's own inputs, a folder that takes no file found only after the work, options dropped, a '$' that
broke the plots, a plot in another format than its name, a folder name made a file, and items rewritten."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from test_cli_files import MATRIX, _err, _one_line
from test_cli_profile import _write_responses

from benchfill.cli import main


def _responses(tmp_path, name: str = "r.csv", text: str = MATRIX) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def _saved_fit(tmp_path, capsys) -> str:
    path = str(tmp_path / "f.json")
    assert main(["fit", "--responses", _responses(tmp_path), "--out", path]) == 0
    capsys.readouterr()
    return path


# -- 1. an output that is one of the command's inputs ---------------------------------------------


@pytest.mark.parametrize(("argv", "pattern"), [
    (["diagnose", "--responses", "r.csv", "--plot", "r.csv"], r"--plot 'r\.csv': is the --responses file"),
    (["diagnose", "--responses", "r.csv", "--plot", "./sub/../r.csv"], r"--plot .*: is the --responses file"),
    (["fit", "--responses", "r.csv", "--out", "r.csv"], r"--out 'r\.csv': is the --responses file"),
    (["calibrate", "--responses", "r.csv", "--items", "it.jsonl", "--size", "2", "--out", "it.jsonl"],
     r"--out 'it\.jsonl': is the --items file"),
    (["calibrate", "--responses", "r.csv", "--size", "2", "--target", "q.txt", "--out", "link.txt"],
     r"--out 'link\.txt': is the --target file"),
    (["profile", "--responses", "r.csv", "--fit", "p/profile.json", "--out", "p"],
     r"--out .p.: p/profile\.json is the --fit file"),
])
def test_an_output_that_is_an_input_is_refused(tmp_path, monkeypatch, capsys, argv, pattern):
    monkeypatch.chdir(tmp_path)
    _responses(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "it.jsonl").write_text("".join(json.dumps({"id": f"q{i}"}) + "\n" for i in range(6)))
    (tmp_path / "q.txt").write_text("0.2 0.5 0.8\n")
    os.link(tmp_path / "q.txt", tmp_path / "link.txt")  # a hard link: one file under two names
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "profile.json").write_text("{}")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    _one_line(*_err(capsys, argv), pattern)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


# -- 2. a folder that takes no new file, found before the work ------------------------------------


@pytest.fixture
def locked(tmp_path):
    """A folder no file can be made in, even by root: immutable where chattr can, else read-only for a user
    other than root, else a link to a folder of /proc (where nobody can make a file)."""
    path = tmp_path / "imm"
    path.mkdir()
    immutable = bool(shutil.which("chattr")) and subprocess.run(["chattr", "+i", str(path)],
                                                                 capture_output=True).returncode == 0
    if not immutable:
        path.chmod(0o555)
        try:
            (path / "probe").touch()
        except OSError:
            pass
        else:
            (path / "probe").unlink()
            path.chmod(0o755)
            path.rmdir()
            path.symlink_to("/proc/sys", target_is_directory=True)
    with pytest.raises(OSError):
        (path / "probe").touch()
    yield path
    if immutable:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    if not path.is_symlink():
        path.chmod(0o755)


@pytest.mark.parametrize(("argv", "flag", "out"), [
    (["fit", "--out"], "--out", "imm/f.json"),
    (["calibrate", "--size", "2", "--out"], "--out", "imm/sub/c.jsonl"),
    (["diagnose", "--plot"], "--plot", "imm/p.png"),
    (["profile", "--draws", "19", "--out"], "--out", "imm"),
    (["profile", "--draws", "19", "--out"], "--out", "imm/new"),
])
def test_an_unwritable_folder_is_named_before_the_work(tmp_path, locked, monkeypatch, capsys, argv, flag, out):
    monkeypatch.chdir(tmp_path)
    listed = os.listdir(locked)
    rc, err = _err(capsys, [argv[0], "--responses", _responses(tmp_path), *argv[1:], out])
    _one_line(rc, err, rf"{flag} '{out}': cannot write in imm \(")  # the user's path, not a temp file's
    assert "profiling" not in err and ".tmp" not in err and os.listdir(locked) == listed


# -- 3. options that contradict each other ---------------------------------------------------------


@pytest.mark.parametrize(("argv", "pattern"), [
    (["diagnose", "--guessing-options", "4", "--no-guessing"], r"--guessing-options 4: --no-guessing"),
    (["fit", "--guessing-options", "4", "--no-guessing"], r"--guessing-options 4: --no-guessing"),
    (["fit", "--engine", "map", "--chains", "8", "--warmup", "5"], r"--chains: .*--engine map does not sample"),
    (["fit", "--warmup", "1000"], r"--warmup: .*--engine map"),  # at its default value: still given
    (["calibrate", "--size", "2", "--draws", "10"], r"--draws: .*--engine map"),
    (["diagnose", "FIT", "--guessing-options", "4"], r"--guessing-options: --fit .*f\.json is a saved fit"),
    (["diagnose", "FIT", "--engine", "map"], r"--engine: --fit .*f\.json is a saved fit"),
])
def test_conflicting_options_are_refused(tmp_path, monkeypatch, capsys, argv, pattern):
    monkeypatch.chdir(tmp_path)
    inputs = ["--fit", _saved_fit(tmp_path, capsys)] if "FIT" in argv else ["--responses", _responses(tmp_path)]
    argv = [a for a in argv if a != "FIT"]
    out = ["--out", "new.json"] if argv[0] == "fit" else []
    _one_line(*_err(capsys, [argv[0], *inputs, *argv[1:], *out]), pattern)
    assert not (tmp_path / "new.json").exists()


def test_the_fit_defaults_are_unchanged(tmp_path, capsys):
    out = tmp_path / "f.json"
    assert main(["fit", "--responses", _responses(tmp_path), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["engine"], summary["model"]) == ("map", "1pl")
    assert main(["fit", "--responses", _responses(tmp_path), "--out", str(out), "--engine", "nuts", "--chains", "2",
                 "--warmup", "20", "--draws", "20", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["fit_diagnostics"]["chains"] == 2 and summary["fit_diagnostics"]["draws"] == 20


# -- 4. a '$' in a file name or an item id ---------------------------------------------------------


def test_a_dollar_in_a_file_name_is_plotted_as_written(tmp_path, capsys):
    r = _responses(tmp_path, name=r"r$\bad{$.csv")
    png = tmp_path / "m.png"
    assert main(["diagnose", "--responses", r, "--plot", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_dollar_in_an_item_id_gives_every_profile_output(tmp_path, capsys):
    resp = _write_responses(tmp_path / "responses.csv")
    resp.write_text(resp.read_text().replace(",q0,", ",$\\bad{$,"))  # q0 is the flagged item
    out = tmp_path / "prof2"
    assert main(["profile", "--responses", str(resp), "--out", str(out), "--draws", "199"]) == 0
    assert json.loads((out / "profile.json").read_text())["flagged"][0]["item_id"] == "$\\bad{$"
    assert sorted(p.name for p in out.iterdir()) == ["histograms.png", "profile.json", "trajectories.png"]


# -- 5. the plot's format is its name's ------------------------------------------------------------


@pytest.mark.parametrize(("name", "magic"), [("p.png", b"\x89PNG"), ("p.pdf", b"%PDF"), ("p.SVG", b"<?xml"),
                                             ("p", b"\x89PNG")])  # no ending: PNG, as before endings were read
def test_a_plot_is_written_in_the_format_its_name_says(tmp_path, capsys, name, magic):
    path = tmp_path / name
    assert main(["diagnose", "--responses", _responses(tmp_path), "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(magic)
    if name.endswith("SVG"):
        assert b"<svg" in path.read_bytes()[:1000]


@pytest.mark.parametrize("name", ["p.txt", "p.jpg"])
def test_a_plot_name_ending_in_no_format_it_writes_is_refused(tmp_path, capsys, name):
    _one_line(*_err(capsys, ["diagnose", "--responses", _responses(tmp_path), "--plot", str(tmp_path / name)]),
              r"--plot '.*': .*ending in \.png, \.pdf or \.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


# -- 6. a folder name where a file is wanted -------------------------------------------------------


@pytest.mark.parametrize("argv", [["fit", "--out"], ["calibrate", "--size", "2", "--out"]])
def test_an_output_ending_in_a_separator_is_refused(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    _one_line(*_err(capsys, [argv[0], "--responses", _responses(tmp_path), *argv[1:], "newdir" + os.sep]),
              r"--out 'newdir/': ends in a separator, naming a folder; give a file")
    assert not (tmp_path / "newdir").exists()


# -- 7. calibrate copies the kept items' lines -----------------------------------------------------


def test_calibrate_copies_the_kept_items_lines(tmp_path, capsys):
    r = _responses(tmp_path, text=MATRIX.replace(",q", ","))  # item ids 0..5
    lines = [f'{{"id": {i},  "text": "caf\\u00e9 {i}",  "n": 1.50}}' for i in range(6)]
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    out = tmp_path / "kept.jsonl"
    assert main(["calibrate", "--responses", r, "--items", str(items), "--size", "3", "--out", str(out)]) == 0
    kept = out.read_text(encoding="utf-8").splitlines()
    assert len(kept) == 3 and set(kept) <= set(lines)


def test_an_output_that_is_a_link_or_a_device_is_refused_and_left_alone(tmp_path, monkeypatch, capsys):
    """The write goes to a file beside the path and is renamed into place: given a link or a device, it
    replaced them (a QA run as root turned the machine's /dev/null into a regular file that way)."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "target.json"
    target.write_text("{}")
    (tmp_path / "link.json").symlink_to(target)
    os.mkfifo(tmp_path / "pipe.json")
    for name, pattern in (("link.json", r"--out 'link.json': is a link \(to .*target\.json\)"),
                          ("pipe.json", r"--out 'pipe.json': is not a regular file")):
        _one_line(*_err(capsys, ["fit", "--responses", _responses(tmp_path), "--out", name]), pattern)
    assert (tmp_path / "link.json").is_symlink() and target.read_text() == "{}"
    assert not (tmp_path / "pipe.json").is_file() and (tmp_path / "pipe.json").exists()


@pytest.mark.parametrize("args", [["diagnose", "--responses", "{r}", "--k", "5"], ["--version"], ["diagnose", "--help"]])
def test_a_reader_that_stops_early_gets_no_traceback_and_exit_141(tmp_path, args):
    # `benchfill ... | head -1`: the closed pipe was found at the interpreter's last flush ("Exception
    # ignored ... BrokenPipeError", exit 120), or in argparse's print (a traceback)
    import sys

    r = tmp_path / "r.csv"
    r.write_text(MATRIX)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    for unbuffered in ("", "1"):
        proc = subprocess.Popen([sys.executable, "-m", "benchfill", *(a.format(r=r) for a in args)], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**env, **({"PYTHONUNBUFFERED": "1"} if unbuffered else {})})
        proc.stdout.close()  # gone before anything is written: the first write meets a closed pipe
        err = proc.stderr.read().decode()
        rc = proc.wait(timeout=60)
        assert err == "", err
        # argparse's help writer swallows a failed write itself (unbuffered, nothing is left to fail)
        assert rc == 141 or (rc == 0 and "--help" in args and unbuffered), rc


def test_an_ascii_terminal_gets_escapes_not_a_traceback_halfway_through_a_table(tmp_path):
    import sys

    r = tmp_path / "r.csv"
    r.write_text("model,item_id,correct,trials\n" + "".join(f"m{j},{i},{min(j + k, 2) if j else 0},2\n"
                                                            for j in range(3)
                                                            for k, i in enumerate(("café", "b", "c"))),
                 encoding="utf-8")
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([sys.executable, "-m", "benchfill", "diagnose", "--responses", str(r)], cwd=tmp_path,
                          env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert b"caf\\xe9" in done.stdout and b"Traceback" not in done.stderr


@pytest.mark.parametrize(("argv", "usage"), [(["diagnose", "--nope"], "usage: benchfill diagnose "),
                                             (["review", "import", "x", "--nope"], "usage: benchfill review import "),
                                             (["sim"], "usage: benchfill sim "), (["probes"], "usage: benchfill probes ")])
def test_a_command_given_an_unknown_option_or_no_action_shows_its_own_usage(capsys, argv, usage):
    # an unknown option showed the top level's usage; `sim` with no action printed the top level's help
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "" and err.startswith(usage), err
    assert "unrecognized arguments: --nope" in err or "required: ACTION" in err


def test_import_release_and_export_name_their_out_flag_before_any_work(tmp_path, capsys):
    # import read every log first and then named an internal temp file; release said "afile/demo: Not a
    # directory"; review export, in a folder that takes no file, named its temp file too
    from pathlib import Path

    logs = Path(__file__).parent / "fixtures" / "lm_eval" / "logs" / "b"
    (tmp_path / "afile").write_text("x")
    for argv, said in ((["import", "lm-eval", str(logs), "--out", str(tmp_path / "afile")], "exists and is not a folder"),
                       (["import", "lm-eval", str(logs), "--out", str(tmp_path / "afile" / "x")], "is a file, not a folder"),
                       (["release", str(tmp_path / "norun"), "--version", "1.0.0", "--out", str(tmp_path / "afile")],
                        "exists and is not a folder"),
                       (["review", "export", str(tmp_path / "norun"), "--out", str(tmp_path / "afile" / "r")],
                        "is a file, not a folder")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("benchfill: error: --out ") and said in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("raised, said", [
    (OSError(28, "No space left on device"), "benchfill: error: no space left on device: free some; what was "
                                               "written before is kept"),
    (OSError(24, "Too many open files"), "benchfill: error: too many open files (the process's limit, ulimit -n): "
                                          "raise it; what was written before is kept"),
    (MemoryError(), "benchfill: error: out of memory (a limit such as ulimit -v, or the machine's)"),
])
def test_a_machine_out_of_room_files_or_memory_is_one_line(tmp_path, monkeypatch, capsys, raised, said):
    # a write or close that meets a full disk names no file: it had been a traceback and exit 1
    from benchfill.irt.fit import IrtFit

    def fail(self, path):
        raise raised

    monkeypatch.setattr(IrtFit, "save", fail)
    responses = tmp_path / "r.csv"
    _write_responses(responses)
    rc = main(["fit", "--responses", str(responses), "--out", str(tmp_path / "fit.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == said and not (tmp_path / "fit.json").exists()


def test_a_full_disk_names_the_file_being_written(tmp_path, monkeypatch, capsys):
    # a write or close names no file: with the run folder, --out and the store on different disks, which was full?
    from pathlib import Path

    write = Path.write_text

    def full(self, *args, **kwargs):
        if self.name.startswith(".fit.json."):  # fit.json's write, into its temp file
            raise OSError(28, "No space left on device")
        return write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    responses = tmp_path / "r.csv"
    _write_responses(responses)
    rc = main(["fit", "--responses", str(responses), "--out", str(tmp_path / "fit.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == (f"benchfill: error: {tmp_path / 'fit.json'}: no space left on device: free "
                                   f"some; what was written before is kept")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]  # no temp file left
    # a file written whole before is not named for a full disk met elsewhere after it (stdout here)
    import io
    import sys

    class Full(io.TextIOBase):
        def write(self, s):
            raise OSError(28, "No space left on device")

    monkeypatch.undo()
    monkeypatch.setattr(sys, "stdout", Full())
    rc = main(["fit", "--responses", str(responses), "--out", str(tmp_path / "fit.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == "benchfill: error: no space left on device: free some; what was written before is kept"


def test_a_stop_says_to_rerun_only_where_a_rerun_resumes():
    # release verify and diff have nothing to resume; a predictor's scorer answers kept in --scorer-cache do
    from benchfill.cli import _resumable, build_parser

    parse = build_parser().parse_args
    assert _resumable(parse(["release", "runs/r", "--version", "1.0.0"]))
    assert not _resumable(parse(["release", "verify", "rel/demo/1.0.0"]))
    assert not _resumable(parse(["release", "diff", "a", "b"]))
    train = ["predict", "train", "--benchmark", "aime25", "--families", "length,entropy", "--scorer", "m@http://h/v1",
             "--out", "p.json"]
    assert _resumable(parse([*train, "--scorer-cache", "s.jsonl"])) and not _resumable(parse(train))
    assert _resumable(parse(["run", "--benchmark", "demo"]))
    # a review sheet is recorded whole or not at all, and a rerun records only what is not yet: a Ctrl-C
    # after the sheet was recorded said "interrupted" alone, and left its user unsure
    assert _resumable(parse(["review", "import", "sheet.csv"]))


def test_a_full_disk_at_a_runs_report_names_the_report(tmp_path, monkeypatch, capsys):
    # the run folder's own writers named no file: with --store on another disk, which one was full?
    from pathlib import Path

    write = Path.write_text

    def full(self, *args, **kwargs):
        if self.name.startswith(".report.json.") and self.name.endswith(".tmp"):  # (its temp file)
            raise OSError(28, "No space left on device")
        return write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    rc = main(["run", "--benchmark", "demo", "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2",
               "--no-confirm", "--quiet", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].endswith("report.json: no space left on device: free some; what was written before "
                                        "is kept; rerun the same command to resume"), err[-1]


def test_a_full_disk_at_the_releases_changelog_names_it_and_leaves_no_temp(tmp_path, monkeypatch):
    from pathlib import Path

    from benchfill.release import _write_changelog

    write = Path.write_text

    def full(self, *args, **kwargs):
        write(self, "half", encoding="utf-8")  # a part was written before the disk filled
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as got:
        _write_changelog(tmp_path, "# Changelog\n")
    # the folder's card is written first (a rerun then writes both again): the file named is the one that failed
    assert got.value.filename == str(tmp_path / "README.md") and list(tmp_path.iterdir()) == []
