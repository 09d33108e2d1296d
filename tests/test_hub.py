"""Benchmarks from the Hugging Face Hub load offline, from the datasets cache or a local folder."""

from __future__ import annotations

import json
import os
import re

import pytest

from benchfill.benchmarks import custom_benchmark, get_benchmark
from benchfill.cli import main
from benchfill.errors import ConfigError, DataError
from benchfill.hub import HubRef, load_items, parse

ROWS = [
    {"id": 60 + i, "problem": f"Find x if x + {i} = {2 * i}.", "answer": str(i), "year": 2024} for i in range(1, 6)
]


def _cache_as_if_downloaded(repo: str, rows: list[dict], split: str, tmp_path) -> None:
    """Prepare the dataset in the datasets cache with datasets' own builder, where an online
    load_dataset(repo) leaves it: <cache>/<ORG>___<name>/default/0.0.0/<hash>/<name>-<split>.arrow."""
    import datasets
    from datasets.packaged_modules.json.json import Json

    assert os.environ["HF_DATASETS_OFFLINE"] == "1"  # conftest: nothing here may reach the Hub
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    org, name = repo.split("/")
    cache = datasets.config.HF_DATASETS_CACHE
    Json(cache_dir=str(cache), dataset_name=name, config_id="default", data_files={split: str(src)},
         hash="0123456789abcdef").download_and_prepare()  # fmt: skip
    os.rename(cache / name, cache / f"{org}___{name}")


def test_parse():
    assert parse("hf:org/name") == HubRef("org/name")
    assert parse("hf:org/name:cfg:train") == HubRef("org/name", "cfg", "train")
    assert parse("hf:org/name::train") == HubRef("org/name", None, "train")
    assert str(parse("hf:org/name::train")) == "hf:org/name::train"
    with pytest.raises(DataError, match="expected hf:ORG/NAME"):
        parse("hf:a/b:c:d:e")


def test_registry_benchmark_loads_from_the_datasets_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.delenv("BENCHFILL_DATA_DIR", raising=False)
    # a cache of this test's own (the process-wide one is shared by every test of the run)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    with pytest.raises(ConfigError, match=r"no local data.*HuggingFaceH4/aime_2024.*not in the Hugging Face cache.*"
                       r"datasets.load_dataset\('HuggingFaceH4/aime_2024'\)"):
        get_benchmark("aime24")
    _cache_as_if_downloaded("HuggingFaceH4/aime_2024", ROWS, "train", tmp_path)  # aime24's split is train
    b = get_benchmark("aime24")
    assert [it["id"] for it in b.items] == ["61", "62", "63", "64", "65"]
    assert b.items[2]["problem"] == "Find x if x + 3 = 6." and b.items[2]["answer"] == "3"
    assert b.spec.text_field == "problem" and list(b.chance) == [0.0] * 5


def test_items_option_reads_a_local_dataset_folder_with_the_spec_mapping(tmp_path, capsys, monkeypatch):
    import datasets

    folder = tmp_path / "data" / "acme" / "quiz"
    rows = [{"qid": f"q{i}", "question": f"{i} + 1?", "gold": str(i + 1), "options": ["1", "2", "3"]} for i in range(4)]
    datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows),
                          "train": datasets.Dataset.from_list(rows[:1])}).save_to_disk(str(folder))  # fmt: skip
    (tmp_path / "spec.toml").write_text('[benchmark]\nname = "quiz"\ntext_field = "question"\nanswer_field = "gold"\n'
                                        'options_field = "options"\nchance = "options"\nid_field = "qid"\n'
                                        'evaluator = "multiple_choice"\n')  # fmt: skip
    monkeypatch.setenv("BENCHFILL_DATA_DIR", str(tmp_path / "data"))
    b = custom_benchmark("hf:acme/quiz::validation", tmp_path / "spec.toml")
    monkeypatch.delenv("BENCHFILL_DATA_DIR")
    assert [it["id"] for it in b.items] == ["q0", "q1", "q2", "q3"] and b.items[1]["gold"] == "2"
    assert list(b.chance) == pytest.approx([1 / 3] * 4)
    with pytest.raises(DataError, match=r"no split 'test' \(the dataset has validation, train\)"):
        load_items("hf:acme/quiz", data_dir=tmp_path / "data")
    # a folder of data files (the layout of a Hub repository) given as the reference itself
    plain = tmp_path / "copy"
    (plain / "data").mkdir(parents=True)
    (plain / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_items(f"hf:{plain}")
    assert [it["id"] for it in items] == [f"copy-{i}" for i in range(4)]  # no id column: NAME-<row>
    assert items[3]["question"] == "3 + 1?" and items[3]["options"] == ["1", "2", "3"]
    # --items hf:... on the command line (no spec: ids are NAME-<row>), checked against responses
    resp = tmp_path / "responses.csv"
    resp.write_text("model,item_id,correct,trials\n" + "".join(f"m{j},quiz-{i},{(i + j) % 3},3\n" for j in range(3) for i in range(4)))
    assert main(["fit", "--responses", str(resp), "--items", "hf:acme/quiz::validation", "--data-dir",
                 str(tmp_path / "data"), "--out", str(tmp_path / "fit.json")]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["fit", "--responses", str(resp), "--items", "hf:acme/missing", "--out", str(tmp_path / "f.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hf:acme/missing: not in the Hugging Face cache" in err[0] and "fetch it once online" in err[0]


def test_a_spec_field_the_dataset_lacks_is_named(tmp_path, monkeypatch):
    import datasets

    folder = tmp_path / "acme" / "quiz"
    datasets.Dataset.from_list([{"id": 1, "question": "?", "gold": "a"}]).save_to_disk(str(folder))
    (tmp_path / "spec.toml").write_text('[benchmark]\nname = "quiz"\ntext_field = "question"\nanswer_field = "answer"\n')
    monkeypatch.setenv("BENCHFILL_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"hf:acme/quiz: no column 'answer' for the spec of quiz \(columns: id, question, gold\)"):
        custom_benchmark("hf:acme/quiz", tmp_path / "spec.toml")


def _quiz_folder(folder, n: int = 24, offset: int = 0) -> None:
    """A folder of data files, as a Hub repository lays them out."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"q{i:02d}", "question": f"What is {i + offset} plus {i}?", "gold": str(2 * i + offset)}
            for i in range(n)]  # fmt: skip
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_run_reads_its_items_from_a_local_dataset_folder_under_the_data_dir(tmp_path, capsys, monkeypatch):
    """`run --items hf:...`: the folder is found under --data-dir (not only $BENCHFILL_DATA_DIR), the
    dataset's rows are hashed as the run's items (there is no file to hash), so a rerun resumes and a
    dataset changed under the same name is refused."""
    monkeypatch.delenv("BENCHFILL_DATA_DIR", raising=False)
    data, runs = tmp_path / "data", tmp_path / "runs"
    _quiz_folder(data / "acme" / "quiz")
    spec = tmp_path / "spec.toml"
    spec.write_text('[benchmark]\nname = "quiz"\ntext_field = "question"\nanswer_field = "gold"\n')
    args = ["run", "--items", "hf:acme/quiz", "--spec", str(spec), "--data-dir", str(data), "--backend", "sim",
            "--runs-dir", str(runs), "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2",
            "--sim-probes", "6", "--sim-pair-sd", "0", "--quiet"]  # fmt: skip (plumbing: a child is chosen)
    assert main(args) == 0
    (run_dir,) = [p for p in runs.iterdir() if p.name != "releases"]
    assert (run_dir / "report.json").is_file() and run_dir.name.startswith("acme_quiz-benchfill-")  # no ':' or '/'
    capsys.readouterr()
    assert main(args) == 0  # the same rows: the run resumes
    _quiz_folder(data / "acme" / "quiz", offset=1)  # other rows under the same name
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--items hf:acme/quiz: the dataset's rows are not those run" in err[0], err


def test_a_local_dataset_folder_is_published_by_its_name_not_its_path(tmp_path, capsys, monkeypatch):
    # `--items hf:/home/alice/private/quiz` made the run id, every released row's run_id, the card and the
    # changelogs carry the whole path (a home folder, a project's name)
    from benchfill.release import release
    from benchfill.review import ReviewBoard

    monkeypatch.delenv("BENCHFILL_DATA_DIR", raising=False)
    folder = tmp_path / "home" / "alice" / "private" / "quiz"
    _quiz_folder(folder)
    spec = tmp_path / "spec.toml"
    spec.write_text('[benchmark]\nname = "quiz"\ntext_field = "question"\nanswer_field = "gold"\n')
    runs = tmp_path / "runs"
    assert main(["run", "--items", f"hf:{folder}::test", "--spec", str(spec), "--backend", "sim",
                 "--runs-dir", str(runs), "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2",
                 "--sim-probes", "6", "--quiet"]) == 0
    (run_dir,) = [p for p in runs.iterdir() if p.name != "releases"]
    assert run_dir.name.startswith("quiz_test-benchfill-"), run_dir.name
    with ReviewBoard(run_dir) as b:
        for e in b.entries:
            b.decide(e.item_id, "ann", "accept")
    out = release(run_dir, "1.0.0").path
    for f in out.rglob("*"):
        if f.is_file() and f.suffix in (".md", ".json", ".jsonl"):
            text = f.read_text()
            assert "alice" not in text and str(tmp_path) not in text, f
    assert "items: hf:quiz::test" in (out / "README.md").read_text()


def test_a_run_an_earlier_version_named_after_the_folders_path_is_resumed_there(tmp_path):
    from benchfill.run import RunOptions, run_id_for

    folder = tmp_path / "home" / "alice" / "quiz"
    opts = RunOptions(benchmark=None, items=f"hf:{folder}", spec="s.toml", runs_dir=str(tmp_path / "runs"))
    new = run_id_for(opts)
    assert new.startswith("quiz-benchfill-")
    old = re.sub(r"[^A-Za-z0-9._-]+", "_", str(folder)).strip("._-")[:64] + new.removeprefix("quiz")
    (tmp_path / "runs" / old).mkdir(parents=True)  # made by benchfill before 2026-12-05
    assert run_id_for(opts) == old


def test_a_fresh_run_directory_is_removed_whatever_stops_the_run_before_its_work(tmp_path, monkeypatch):
    import benchfill.run as run_module

    def broken(store, items):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(run_module, "_record_originals", broken)
    _quiz_folder(tmp_path / "acme" / "quiz")
    spec = tmp_path / "spec.toml"
    spec.write_text('[benchmark]\nname = "quiz"\ntext_field = "question"\nanswer_field = "gold"\n')
    opts = run_module.RunOptions(benchmark=None, items="hf:acme/quiz", spec=str(spec), data_dir=str(tmp_path),
                                 backend="sim", runs_dir=str(tmp_path / "runs"), progress=False)  # fmt: skip
    with pytest.raises(RuntimeError, match="disk gone"):
        run_module.run(opts)
    assert not (tmp_path / "runs").exists()  # nor the runs dir it made


def test_a_malformed_line_of_a_local_data_file_is_named_and_no_progress_bar_is_drawn(tmp_path, capsys):
    folder = tmp_path / "acme" / "quiz"
    _quiz_folder(folder, n=3)
    resp = tmp_path / "responses.csv"
    resp.write_text("model,item_id,correct,trials\n" + "".join(f"m{j},q0{i},{(i + j) % 3},3\n"
                                                              for j in range(3) for i in range(3)))  # fmt: skip
    fit = ["fit", "--responses", str(resp), "--items", "hf:acme/quiz", "--data-dir", str(tmp_path), "--out",
           str(tmp_path / "fit.json")]  # fmt: skip
    assert main(fit) == 0
    assert "Generating" not in capsys.readouterr().err  # datasets' "Generating test split" bar
    data = folder / "data" / "test.jsonl"
    lines = data.read_text().splitlines()
    data.write_text("\n".join([lines[0], lines[1][:-1], lines[2]]) + "\n")  # line 2 loses its closing brace
    (tmp_path / "fit.json").unlink()
    assert main(fit) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"benchfill: error: hf:acme/quiz: {data}:2: malformed JSON (Expecting ',' delimiter, column 1)"]
    assert not (tmp_path / "fit.json").exists()


def test_aime25s_fetch_hint_names_a_dataset_its_spec_reads(tmp_path, monkeypatch):
    """The hint's load_dataset call leaves in the cache a dataset with aime25's columns (problem, answer)
    under its default config and its test split: what the offline load then reads."""
    import datasets

    monkeypatch.delenv("BENCHFILL_DATA_DIR", raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    with pytest.raises(ConfigError, match=r"datasets\.load_dataset\('math-ai/aime25'\)"):
        get_benchmark("aime25")
    _cache_as_if_downloaded("math-ai/aime25", [{**r, "id": str(r["id"])} for r in ROWS], "test", tmp_path)
    b = get_benchmark("aime25")
    assert [it["id"] for it in b.items] == ["61", "62", "63", "64", "65"] and b.items[0]["answer"] == "1"
