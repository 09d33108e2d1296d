"""Release polish: the benchmark folder's card and every changelog mark simulated figures; ``release diff``
warns of a side that does not match its manifest; the run's progress line says which deviation it gives; a
malformed inspect_ai log names its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.engine.backend import chosen_deviation
from benchfill.errors import DataError
from benchfill.importers.inspect_log import read_log
from benchfill.release import release, root_card, verify_release
from benchfill.review import ReviewBoard
from benchfill.search.annotate import Annotation
from benchfill.search.loop import Child, GapSearch
from benchfill.search.services import Verdict
from benchfill.store import Store

# inspect_ai's own retry set-up, when the fixture's mockllm eval runs (as in test_importers)
pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")


def test_a_simulated_release_is_marked_in_the_folder_card_and_every_changelog(tmp_path, shared_data):
    # the folder's card (the Hub's landing page) and the changelogs listed simulated figures unmarked
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    res = release(run, "1.0.0")
    folder = res.path.parent
    card = (folder / "README.md").read_text()
    assert "> **SIMULATED**: 1.0.0 comes from a run on the simulated world" in card
    for log in (folder / "CHANGELOG.md", res.path / "CHANGELOG.md"):
        entry = log.read_text().split("### 1.0.0", 1)[1]
        assert entry.split("\n")[2].startswith("- **SIMULATED**: made from a run on the simulated world")
    assert verify_release(res.path, res.manifest_sha256) == []  # (the version's changelog is hashed as written)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    res = release(run, "1.1.0")
    assert "> **SIMULATED**: 1.1.0 and 1.0.0 come from" in (folder / "README.md").read_text()
    assert (folder / "CHANGELOG.md").read_text().count("- **SIMULATED**") == 2  # each entry keeps its own
    assert verify_release(res.path, res.manifest_sha256) == []


def test_a_release_from_a_real_run_is_not_marked(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    store = Store(run / "store.db")
    store.set_meta("backend", "openai")
    store.close()
    queue = run / "review_queue.jsonl"
    queue.write_text("".join(json.dumps({**json.loads(line), "simulated": False}) + "\n"
                             for line in queue.read_text().splitlines()))
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    res = release(run, "1.0.0")
    for f in (res.path.parent / "README.md", res.path.parent / "CHANGELOG.md", res.path / "CHANGELOG.md"):
        assert "SIMULATED" not in f.read_text()


def test_the_folder_card_names_which_versions_are_simulated(tmp_path):
    folder = tmp_path / "aime24"
    for v, meta in (("1.0.0", {"simulated": True}), ("1.1.0", {"simulated": False}),
                    ("1.2.0", {"simulated": False, "scale_simulated": True})):
        (folder / v).mkdir(parents=True)
        (folder / v / "README.md").write_text(f"---\nbenchfill: {json.dumps(meta)}\n---\n# card\n")
        (folder / v / "manifest.json").write_text("{}")  # (a version folder without one is not a release)
    card = root_card(folder)
    assert ("> **SIMULATED**: 1.0.0 comes from a run on the simulated world (items' places, any generated item and "
            "every figure simulated, not a model's); 1.2.0 rests on a scale of record") in card
    assert "1.1.0 " not in card.split("**SIMULATED**", 1)[1].split("\n")[0]


def _child(item_id: str, z: float, confirmed: float | None = None) -> Child:
    def at(zz: float) -> Annotation:
        return Annotation(difficulty=zz, se=0.1, z=zz, z_se=0.01, rollouts=24)

    return Child(item_id, "p", "p", 1, {"problem": item_id}, Verdict(True), at(z),
                 confirmation=at(confirmed) if confirmed is not None else None)


def test_the_round_line_gives_the_confirmed_deviation_of_a_confirmed_child():
    # gap 2 of aime24 had said "deviation 0.0083" for 8 rounds while its chosen child was confirmed 0.046 away,
    # outside the gap, and the headline then named it outside_gap
    gap = GapSearch(2, 0.796, 0.880, {}, {})
    near = _child("c1", gap.target_z + 0.0083, confirmed=0.7912)
    far = _child("c2", gap.target_z + 0.05)
    assert chosen_deviation(near, gap) == \
        "chosen child's confirmed deviation 0.0468, outside the gap (annotated 0.0083)"
    inside = _child("c1", gap.target_z - 0.01, confirmed=gap.target_z + 0.02)
    assert chosen_deviation(inside, gap) == \
        "chosen child's confirmed deviation 0.0200 (annotated 0.0100)"
    assert chosen_deviation(far, gap) == "chosen child's annotated deviation 0.0500"
    assert chosen_deviation(None, gap) == "no valid child yet"


def test_a_gap_restored_after_one_round_says_one_round(tmp_path, capsys):
    args = ["run", "--benchmark", "demo", "--runs-dir", str(tmp_path), "--gaps", "1", "--rounds", "1",
            "--parents", "2", "--children", "2", "--sim-probes", "6"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    said = capsys.readouterr()
    assert "gap 0: restored from the store (1 round, done)" in said.out + said.err


def test_release_diff_warns_of_a_side_that_does_not_match_its_manifest(tmp_path, shared_data, capsys):
    # a row edited after the release diffed as "1 changed", exit 0, with no word that it fails verify
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    a = release(run, "1.0.0").path
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    b_ = release(run, "1.1.0").path
    assert main(["release", "diff", str(a), str(b_)]) == 0
    assert "does not match" not in capsys.readouterr().err  # two releases as made: no warning
    data = b_ / "data" / "test.jsonl"
    rows = data.read_text().splitlines()
    first = json.loads(rows[0])
    rows[0] = json.dumps({**first, "answer": "999"})
    data.write_text("\n".join(rows) + "\n")
    assert main(["release", "diff", str(a), str(b_)]) == 0  # still a diff: the files as they are
    said = capsys.readouterr()
    assert f"~ {first['id']} (answer)" in said.out
    (line,) = [x for x in said.err.splitlines() if "manifest" in x]
    assert line.startswith(f"benchfill: warning: {b_} does not match its manifest: {data}: sha256 differs")
    assert line.endswith(f"`benchfill release verify {b_}` lists what differs")
    assert str(a) + " " not in said.err  # the side that verifies is not named


@pytest.fixture(scope="module")
def inspect_log_pair(tmp_path_factory):
    """One finished inspect_ai log of each format (a mockllm model, as test_importers makes them)."""
    from inspect_ai import eval as inspect_eval
    from test_importers import _mock, _task

    root = tmp_path_factory.mktemp("inspect")
    for fmt in ("json", "eval"):
        inspect_eval(_task(), model=_mock("beta", {"q1", "q4"}), log_dir=str(root / fmt), log_format=fmt,
                     display="none")
    return next((root / "json").iterdir()), next((root / "eval").iterdir())


def _edited_json(log: Path, tmp_path: Path, edit) -> Path:
    data = json.loads(log.read_text())
    edit(data)
    out = tmp_path / log.name
    out.write_text(json.dumps(data))
    return out


@pytest.mark.parametrize(("edit", "said"), [
    (lambda d: d["samples"][0].update(id=None),
     "field samples.0.id: Input should be a valid integer or a valid string, got None"),
    (lambda d: d["eval"].update(model=1), "field eval.model: Input should be a valid string, got 1"),
    (lambda d: d["eval"].pop("task"), "field eval.task: Field required"),
    # a score named by the log with a line break and an escape: the message stays one line, escapes shown
    (lambda d: d["samples"][0]["scores"].update({"evil\n\x1b[31mX": "not a score"}),
     "field samples.0.scores.evil\\n\\x1b[31mX: Input should be a valid dictionary or instance of Score, "
     "got 'not a score'"),
])
def test_a_malformed_inspect_log_names_its_first_bad_field(inspect_log_pair, tmp_path, capsys, edit, said):
    # it had said "ValidationError: 2 validation errors for EvalLog", naming no field
    bad = _edited_json(inspect_log_pair[0], tmp_path, edit)
    assert main(["import", "inspect", str(bad), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"benchfill: error: {bad}: not a readable inspect_ai eval log: {said}"
    assert not (tmp_path / "out").exists()


def test_a_malformed_sample_in_an_eval_log_names_its_field(inspect_log_pair, tmp_path):
    import zipfile

    import inspect_ai.log  # noqa: F401  (inspect registers the zstd compression its .eval logs use)

    good, bad = inspect_log_pair[1], tmp_path / "bad.eval"
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bad, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name.startswith("samples/q2_"):
                data = json.dumps({**json.loads(data), "id": None}).encode()
            zout.writestr(name, data)
    with pytest.raises(DataError) as err:
        read_log(bad, metric=None, threshold=None)
    assert str(err.value) == (f"{bad}: not a readable inspect_ai eval log: field id (in EvalSample): Input should "
                              "be a valid integer or a valid string, got None")
