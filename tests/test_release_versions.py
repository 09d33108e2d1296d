"""Releases: datasets loads them with provenance, manifests verify, versions are immutable, diffs."""

from __future__ import annotations

import json

import pytest
from test_review_support import CHILD_IDS, make_run, record_fit

from benchfill.errors import BenchfillError, ConfigError
from benchfill.release import diff_releases, release, root_card, semver_key, verify_release
from benchfill.review import ReleaseRule, ReviewBoard
from benchfill.schema import Release


def _review(run):
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
        b.decide(CHILD_IDS[0], "bob", "accept")
        b.decide(CHILD_IDS[1], "ann", "reject", reason="two answers fit")
        b.decide(CHILD_IDS[2], "bob", "edit", text="Edited: find x.", answer="12")
        b.decide(CHILD_IDS[3], "ann", "accept")
        b.decide(CHILD_IDS[3], "bob", "reject", reason="near duplicate of its parent")


def test_release_loads_with_datasets_and_carries_provenance(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _review(run)
    res = release(run, "1.0.0")
    assert res.path == tmp_path / "releases" / "aime24" / "1.0.0"
    assert (res.n_original, res.n_generated) == (30, 2)
    assert verify_release(res.path) == []

    import datasets

    ds = datasets.load_dataset(str(res.path), split="test")
    assert ds.num_rows == 32
    gen = {r["id"]: r for r in ds if r["origin"] == "generated"}
    assert set(gen) == {CHILD_IDS[0], CHILD_IDS[2]}
    edited = gen[CHILD_IDS[2]]
    assert edited["problem"] == "Edited: find x." and edited["answer"] == "12" and edited["edited"]
    assert json.loads(edited["original_fields"])["problem"].startswith("<script>")  # original kept
    acc = gen[CHILD_IDS[0]]
    assert acc["ancestor_id"] and acc["gap_left"] < acc["target_z"] < acc["gap_right"]
    assert acc["difficulty_source"] == "confirmed" and acc["difficulty_se"] == 0.3
    assert json.loads(acc["probe_panel"]) == ["p0", "p1", "p2"]
    assert {r["reviewer"] for r in json.loads(acc["reviews"])} == {"ann", "bob"}
    assert acc["rewriter_model"] == "sim/rewriter" and acc["simulated"]
    orig = next(r for r in ds if r["origin"] == "original")
    assert orig["ancestor_id"] is None and orig["difficulty_source"] == "irt_fit"
    card = (res.path / "README.md").read_text()
    assert "max gap" in card and "plots/ecdf_before_after.png" in card and "simulated" in card
    # a simulated run's originals are placed by its fit, which the simulated panel joins: said too
    assert "The original items' difficulties, and so every \"before\" figure, come from this run's IRT fit" in card
    assert "nearly repeat" not in card  # none accepted here
    assert (res.path / "plots" / "ecdf_before_after.png").read_bytes()[:4] == b"\x89PNG"
    with ReviewBoard(run) as b:
        assert [r.version for r in b.store.all(Release)] == ["1.0.0"]


def test_the_benchmark_folder_loads_one_version_at_a_time(tmp_path, shared_data):
    # pushed whole as one Hub repository, it had loaded every version's rows into one split (each item twice)
    import datasets

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    v1 = release(run, "1.0.0")
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    release(run, "1.1.0")
    folder = v1.path.parent
    assert datasets.load_dataset(str(folder), split="test").num_rows == 32  # the latest, by default
    assert datasets.load_dataset(str(folder), "1.0.0", split="test").num_rows == 31
    card = (folder / "README.md").read_text()
    assert "- [1.1.0](1.1.0/README.md) (latest)\n- [1.0.0](1.0.0/README.md)" in card


def test_the_maintainers_own_readme_in_the_benchmark_folder_is_kept(tmp_path, shared_data):
    # the folder's card replaced a README.md the maintainer wrote there, at every release
    import datasets
    import yaml

    from benchfill.store import Store

    run = make_run(tmp_path, shared_data)
    store = Store(run / "store.db")
    store.set_meta("benchmark", {"name": "aime24", "text_field": "problem", "answer_field": "answer",
                                 "license": "mit"})
    store.close()
    folder = tmp_path / "releases" / "aime24"
    folder.mkdir(parents=True)
    own = "---\nlanguage: [en]\ntags: [math]\n---\n# Our AIME set\n\nMaintained by the maths team. ünïcode kept.\n"
    (folder / "README.md").write_text(own, encoding="utf-8")
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    release(run, "1.0.0")
    card = (folder / "README.md").read_text(encoding="utf-8")
    head = yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))
    assert head["language"] == ["en"] and head["tags"] == ["math", "benchfill", "difficulty", "irt"]
    assert head["license"] == "mit"  # the Hub reads the repository's licence from this card
    assert [c["config_name"] for c in head["configs"]] == ["1.0.0"]
    assert "# Our AIME set\n\nMaintained by the maths team. ünïcode kept.\n" in card
    assert "- [1.0.0](1.0.0/README.md) (latest)" in card
    # the maintainer edits around the list; the next release rewrites the list only
    (folder / "README.md").write_text(card.replace("Maintained by", "Kept by") + "\nA footer.\n", encoding="utf-8")
    store = Store(run / "store.db")  # the spec's licence changes: the folder's card follows the latest version
    store.set_meta("benchmark", {"name": "aime24", "text_field": "problem", "answer_field": "answer",
                                 "license": "apache-2.0"})
    store.close()
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    release(run, "1.1.0")
    card = (folder / "README.md").read_text(encoding="utf-8")
    head = yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))
    assert head["license"] == "apache-2.0" and head["language"] == ["en"]
    assert "Kept by the maths team" in card and card.endswith("\nA footer.\n") and card.count("# Our AIME") == 1
    assert "- [1.1.0](1.1.0/README.md) (latest)\n- [1.0.0](1.0.0/README.md)\n" in card
    assert card.count("benchfill: end of the versions") == 1
    assert datasets.load_dataset(str(folder), split="test").num_rows == 32


def test_a_folder_card_from_before_the_markers_is_replaced_whole(tmp_path, shared_data):
    import yaml

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    folder = release(run, "1.0.0").path.parent

    def release_over(text: str, child: int, version: str) -> str:
        """The folder's card after ``version`` is released over a card reading ``text``."""
        (folder / "README.md").write_text(text)
        with ReviewBoard(run) as b:
            b.decide(CHILD_IDS[child], "ann", "accept")
        release(run, version)
        return (folder / "README.md").read_text()

    def unmarked(card: str, *drop: str) -> str:
        return "\n".join(line for line in card.splitlines()
                         if not line.startswith("<!-- benchfill") and line not in drop) + "\n"

    # as the card was written before the markers: the same text without them
    card = release_over(unmarked((folder / "README.md").read_text()), 1, "1.1.0")
    assert card.count("# aime24: benchfill releases") == 1 and card.count("(latest)") == 1
    # the maintainer edited that card and took the markers out: their text is theirs, kept
    card = release_over(unmarked(card) + "Our note.\n", 2, "1.2.0")
    assert "Our note." in card and "- [1.2.0](1.2.0/README.md) (latest)" in card
    # an old card otherwise as generated, with the maintainer's keys and link lines of theirs: all kept
    old = unmarked(card, "Our note.", "## benchfill releases").replace("pretty_name:", "language:\n- en\npretty_name:", 1)
    old = old.replace("- [1.0.0](1.0.0/README.md)\n", "- [1.0.0](1.0.0/README.md)\n- [Paper](https://x.org)\n"
                      "- [examples](examples/README.md)\n")
    card = release_over(old, 3, "1.3.0")
    assert yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))["language"] == ["en"]
    assert "- [Paper](https://x.org)" in card and "- [1.3.0](1.3.0/README.md) (latest)" in card
    assert "- [examples](examples/README.md)" in card
    # a README saved with a byte-order mark: its front matter read as one, not as text
    (folder / "README.md").write_text("\ufeff---\nlicense: mit\n---\n# Mine\n", encoding="utf-8")
    assert "license: mit" in root_card(folder) and root_card(folder).count("---\n") == 2


def test_the_card_carries_the_specs_licence_and_citation_or_says_none_is_stated(tmp_path, shared_data):
    import yaml

    from benchfill.store import Store

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    card = (release(run, "1.0.0").path / "README.md").read_text()
    assert "license" not in yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))
    assert "The benchmark's spec states no licence for the original items" in card
    store = Store(run / "store.db")
    store.set_meta("benchmark", {"name": "aime24", "text_field": "problem", "answer_field": "answer",
                                 "license": "mit", "citation": "@misc{aime24, title={AIME 2024}}"})
    store.close()
    v11 = release(run, "1.1.0")
    card = (v11.path / "README.md").read_text()
    head = yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))
    assert head["license"] == "mit"  # the Hub's field
    assert "Their licence, as the benchmark's spec states it: mit." in card
    assert "Cite the original items as:\n\n```\n@misc{aime24, title={AIME 2024}}\n```" in card
    # free text is no id the Hub takes: "other", and the text as its name
    store = Store(run / "store.db")
    store.set_meta("benchmark", {"name": "aime24", "text_field": "problem", "answer_field": "answer",
                                 "license": "MAA terms of use,\n  see their site"})
    store.close()
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    card = (release(run, "1.2.0").path / "README.md").read_text()
    head = yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))
    assert (head["license"], head["license_name"]) == ("other", "MAA terms of use, see their site")
    # a release folder made before the folder's card gets it from the same command run again
    (v11.path.parent / "README.md").unlink()
    release(run, "1.2.0")
    assert "- [1.2.0](1.2.0/README.md) (latest)" in (v11.path.parent / "README.md").read_text()


def test_the_card_names_accepted_near_duplicates(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[3], "ann", "accept")  # flagged near_duplicate by its run
    card = (release(run, "1.0.0").path / "README.md").read_text()
    assert (f"> 1 generated item(s) nearly repeat an item of the benchmark (flag `near_duplicate`): "
            f"`{CHILD_IDS[3]}`.") in card


def test_release_rule_is_configurable(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _review(run)
    strict = release(run, "1.0.0", rule=ReleaseRule(min_accepts=2))  # only item 0 has two accepts
    assert strict.n_generated == 1
    lenient = release(run, "1.1.0", rule=ReleaseRule(min_accepts=1, max_rejects=1))
    assert lenient.n_generated == 3
    d = diff_releases(strict.path, lenient.path)
    assert (d.a, d.b) == ("1.0.0", "1.1.0")
    assert d.added == [CHILD_IDS[2], CHILD_IDS[3]] and d.removed == [] and d.changed == {}
    log = (lenient.path / "CHANGELOG.md").read_text()
    assert log.index("### 1.1.0") < log.index("### 1.0.0")  # appended across versions, newest first
    assert (tmp_path / "releases" / "aime24" / "CHANGELOG.md").read_text() == log


def test_existing_version_is_refused_and_nothing_changes(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _review(run)
    first = release(run, "1.0.0")
    before = {p: p.read_bytes() for p in first.path.rglob("*") if p.is_file()}
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "cy", "accept")
    with pytest.raises(BenchfillError, match="release 1.0.0 of aime24 already exists"):
        release(run, "1.0.0", rule=ReleaseRule(max_rejects=5))
    with pytest.raises(BenchfillError, match="not newer than the latest release 1.0.0"):
        release(run, "0.9.0")
    with pytest.raises(ConfigError, match="not a semantic version"):
        release(run, "v1.1")
    after = {p: p.read_bytes() for p in first.path.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in first.path.parent.iterdir()) == ["1.0.0", "CHANGELOG.md", "README.md",
                                                                    "scale_of_record.json"]  # no temp left


def test_tampering_is_detected_by_the_manifest(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _review(run)
    path = release(run, "1.0.0").path
    data = path / "data" / "test.jsonl"
    text = data.read_text()
    data.write_text(text.replace('"answer": "12"', '"answer": "13"', 1))
    (path / "notes.txt").write_text("hand-added")
    problems = verify_release(path)
    assert any("test.jsonl: sha256 differs" in p for p in problems)
    assert any("notes.txt: not in the manifest" in p for p in problems)
    (path / "plots" / "ecdf_before_after.png").unlink()
    assert any("ecdf_before_after.png: listed in the manifest but missing" in p for p in verify_release(path))


def test_semver_ordering():
    assert semver_key("1.0.0-rc.1") < semver_key("1.0.0") < semver_key("1.0.1") < semver_key("1.10.0")
    assert semver_key("1.0.0-alpha") < semver_key("1.0.0-alpha.1") < semver_key("1.0.0-beta")


def test_one_scale_of_record_per_benchmark(tmp_path, shared_data):
    """Releases from two runs whose fits sit on different scales: the originals keep the first
    release's difficulties, so their "before" figures are the same, and the second run's items are
    mapped onto that scale through the original items both fits share."""
    from benchfill.irt.fit import IrtFit

    first = make_run(tmp_path, shared_data, "run-a")
    second = make_run(tmp_path, shared_data, "run-b")
    fit = IrtFit.load(second / "fit.json")  # the same items, measured on a stretched, shifted scale
    fit.difficulty = 2.0 * fit.difficulty + 1.0
    fit.b_min, fit.b_max = 2.0 * fit.b_min + 1.0, 2.0 * fit.b_max + 1.0
    record_fit(second, fit)
    _review(first)
    _review(second)
    out = tmp_path / "releases"
    a = release(first, "1.0.0", out=out)
    b = release(second, "1.1.0", out=out)
    rows = {v: {r["id"]: r for r in map(json.loads, (p.path / "data" / "test.jsonl").read_text().splitlines())}
            for v, p in (("a", a), ("b", b))}
    for item_id, row in rows["a"].items():
        if row["origin"] == "original":
            assert rows["b"][item_id]["z"] == pytest.approx(row["z"], abs=1e-9)
            assert rows["b"][item_id]["difficulty"] == pytest.approx(row["difficulty"], abs=1e-9)
    card_a, card_b = ((p.path / "README.md").read_text() for p in (a, b))

    def before(card: str) -> list[str]:  # the "before" column of the card's coverage table
        table = card.split("| figure | before | after |")[1].split("![")[0]
        return [ln.split("|")[2] for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln]

    assert before(card_a) == before(card_b)
    assert "scale of record of aime24 is the IRT fit of run `run-a`" in card_b
    assert "b_record = -0.5000 + 0.5000 b_run" in card_b  # by hand: b_run = 2 b + 1
    # A new item of the second run is placed through the same map: b_record = -0.5 + 0.5 b_run.
    rec = json.loads((out / "aime24" / "scale_of_record.json").read_text())
    new_b = [r for r in rows["b"].values() if r["origin"] == "generated" and r["released_in"] == "1.1.0"]
    assert new_b
    queue = {q["item_id"]: q for q in map(json.loads, (second / "review_queue.jsonl").read_text().splitlines())}
    for r in new_b:
        conf = queue[r["id"].split("@")[0]]["confirmed"]  # on the run's own scale
        b_rec = -0.5 + 0.5 * conf["difficulty"]
        assert r["difficulty"] == pytest.approx(b_rec, abs=1e-9)
        assert r["confirmed_difficulty"] == pytest.approx(b_rec, abs=1e-9)  # every column of the row alike
        assert r["difficulty_se"] == pytest.approx(0.5 * conf["se"]) == r["confirmed_se"]  # the se is mapped with it
        assert r["z_se"] == pytest.approx(0.5 * conf["se"] / (rec["b_max"] - rec["b_min"]))
        assert r["z"] == pytest.approx((b_rec - rec["b_min"]) / (rec["b_max"] - rec["b_min"]), abs=1e-9)
    assert (out / "aime24" / "scale_of_record.json").is_file()


def test_card_after_figures_carry_the_run_reports_interval(tmp_path, shared_data):
    """The card's after-interval and averaged figures are benchfill.measure.before_after's, as the run
    report's are, from each new item's placement z se (its sampling and the panel's inherited ability
    error) on the scale of record."""
    import yaml

    from benchfill.irt.fit import IrtFit
    from benchfill.measure.before_after import before_after

    run = make_run(tmp_path, shared_data)
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    recs[0]["confirmed"]["placement_z_se"] = 0.04  # what a run records now
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    _review(run)
    res = release(run, "1.0.0")
    rows = [json.loads(x) for x in (res.path / "data" / "test.jsonl").read_text().splitlines()]
    fit = IrtFit.load(run / "fit.json")
    span = fit.b_max - fit.b_min
    gen = [r for r in rows if r["origin"] == "generated"]
    assert [r["id"] for r in gen] == [CHILD_IDS[0], CHILD_IDS[2]]
    assert gen[0]["z_se"] == pytest.approx(0.04)
    assert gen[1]["z_se"] == pytest.approx(0.3 / span)  # a record from before placement_z_se: sampling alone
    assert all(r["z_se"] == pytest.approx(0.45 / span) for r in rows if r["origin"] == "original")

    z_before = [r["z"] for r in rows if r["origin"] == "original"]
    # the item bob edited is released but not placed: its rollouts measured the text before the edit
    placed = [r for r in gen if not r["edited"]]
    assert [r["id"] for r in placed] == [CHILD_IDS[0]] and gen[1]["difficulty_source"].endswith(", before the edit")
    ba = before_after(z_before, [r["z"] for r in placed], [r["z_se"] for r in placed], 5)
    card = (res.path / "README.md").read_text()
    assert "1 generated item(s) were edited in review after their difficulty was measured" in card
    coverage = yaml.safe_load(card.split("---\n")[1])["benchfill"]["coverage"]
    before, after = coverage["before"], coverage["after"]
    assert after["interval_level"] == 0.9
    for name in ("max_gap", "top5_gap_sum", "ddm"):
        assert after["after_interval"][name] == pytest.approx(ba["after_interval"][name])
        assert after["after_expected"][name] == pytest.approx(ba["after_expected"][name])
    assert after["top5_gap_sum"] == pytest.approx(ba["after"]["top5_gap_sum"], abs=5e-5)
    lo, hi = ba["after_interval"]["top5_gap_sum"]
    assert lo < ba["after_expected"]["top5_gap_sum"] < hi
    # every figure to four places, as its interval (a sum of 0.43 read as less precise than 0.4312)
    assert (f"| top-5 gap sum | {before['top5_gap_sum']:.4f} | {after['top5_gap_sum']:.4f} | {lo:.4f} to {hi:.4f} |"
            in card)
    assert f"| items | {before['items']} | {after['items']} |" in card
    assert "| figure | before | after | after, 90% interval |" in card
    assert f"({100 * ba['reduction_expected']:.1f}% below before;" in card


def test_a_release_of_a_simulated_run_with_nothing_accepted_is_marked_simulated(tmp_path, shared_data):
    """No generated row carries the flag, yet the simulated panel's answers placed the original items (and the
    release may establish the benchmark's scale of record): the card and its metadata say simulated."""
    import yaml

    run = make_run(tmp_path, shared_data)
    res = release(run, "0.1.0")
    assert res.n_generated == 0
    card = (res.path / "README.md").read_text()
    assert yaml.safe_load(card.split("---\n")[1])["benchfill"]["simulated"] is True
    assert "This release comes from a run on the **simulated** world" in card


def test_original_items_that_differ_from_the_previous_releases_are_said_in_the_changelog_card_and_result(
        tmp_path, shared_data):
    # an items file edited between runs: the changelog and the summary said nothing, and the card claimed the
    # "before" figures were the same in every release
    from benchfill.schema import Item
    from benchfill.store import Store

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    first = release(run, "1.0.0")
    assert first.originals == {}
    store = Store(run / "store.db")
    with store.session() as s:
        row = s.get(Item, (store.run_id, "2024-I-03"))
        data = json.loads(row.data_json)
        data["answer"] = "999999"
        row.data_json = json.dumps(data)
        s.add(row)
    store.close()
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    res = release(run, "1.1.0")
    assert res.originals == {"added": [], "removed": [], "changed": {"2024-I-03": ["answer"]}}
    log = (res.path / "CHANGELOG.md").read_text()
    # a changed item keeps its place: the before figures stay (an added or removed one moves them)
    assert ("- the original items differ from 1.0.0's (1 changed); the \"before\" figures stay: a changed item "
            "keeps the place the scale of record measured its earlier version at") in log
    assert "  - original changed `2024-I-03` (answer): it keeps the place" in log
    card = (res.path / "README.md").read_text()
    assert "This release's original items are not 1.0.0's (1 changed; the changelog names them): the \"before\"" in card
    assert yaml_meta(card)["coverage"]["before"] == yaml_meta((first.path / "README.md").read_text())["coverage"]["before"]
    # the rerun that finishes an interrupted release says it too
    from benchfill.release import _result_of

    with ReviewBoard(run) as b:
        assert _result_of(b, res.path, "1.1.0", res.manifest_sha256).originals == res.originals
    # a release whose originals are its predecessor's says nothing of them
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[2], "ann", "accept")
    again = release(run, "1.2.0")
    assert again.originals == {} and "original items differ" not in (again.path / "CHANGELOG.md").read_text()[:400]


def yaml_meta(card: str) -> dict:
    import yaml

    return yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))["benchfill"]


def test_carry_forward_names_original_items_added_and_removed():
    from benchfill.release import PROVENANCE
    from benchfill.release_carry import carry_forward

    prev = {"a": {"id": "a", "origin": "original", "q": "1", "run_id": "r1"},
            "b": {"id": "b", "origin": "original", "q": "2", "run_id": "r1"}}
    rows = [{"id": "a", "origin": "original", "q": "1", "run_id": "r2"},  # another run: provenance, not a change
            {"id": "c", "origin": "original", "q": "3", "run_id": "r2"}]
    carry = carry_forward(rows, prev, "1.0.0", None, {}, {}, PROVENANCE, "r2")
    assert (carry.originals_added, carry.originals_removed, carry.originals_changed) == (["c"], ["b"], {})
    assert carry.originals_summary() == "1 added, 1 removed"
    assert "- the original items differ from 1.0.0's (1 added, 1 removed); the \"before\" figures move with them" \
        in carry.changelog()


def test_a_releases_folder_its_owner_write_protected_is_not_opened_up(tmp_path):
    # `chmod -R a-w releases` then a release: the folder came back writable (mode | 0o755)
    import stat

    from benchfill.release import _mkdir_public

    folder = tmp_path / "releases" / "quiz"
    folder.mkdir(parents=True)
    folder.chmod(0o500)
    try:
        _mkdir_public(folder)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o555  # readable by others, still not writable
        _mkdir_public(folder / "new" / "deeper")  # (as root: a user would be refused here)
        assert stat.S_IMODE((folder / "new").stat().st_mode) & 0o755 == 0o755  # made here: the owner's
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize(("readme", "said"), [
    ("Caf\xe9 notes\n".encode("cp1252"), r"README\.md: not UTF-8 text; each release keeps your text in it"),
    (b"# Ours\n\n<!-- benchfill: end of the versions -->\nA footer.\n",
     r"README\.md: benchfill's two markers .* \(0 begin, 1 end\) are not one pair in order"),
    (b"---\n- a\n- b\n---\n# Ours\n", r"README\.md: its front matter is a YAML list, not a mapping"),
    (b"---\nlicense: [mit\n---\n# Ours\n", r"README\.md: its front matter is not YAML"),
    # not a file the release keeps: a changelog of the maintainer's own (it was replaced whole)
    (None, r"CHANGELOG\.md: not a changelog benchfill wrote"),
])
def test_a_readme_the_release_could_not_keep_whole_is_refused_before_anything_is_written(tmp_path, shared_data,
                                                                                         readme, said):
    # a cp1252 README was taken for no file and overwritten; after a lone marker the maintainer's text was dropped
    run = make_run(tmp_path, shared_data)
    folder = tmp_path / "releases" / "aime24"
    folder.mkdir(parents=True)
    name, readme = ("CHANGELOG.md", b"# Our changelog\n- 2024: hand-curated v0\n") if readme is None else \
        ("README.md", readme)
    (folder / name).write_bytes(readme)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    with pytest.raises(BenchfillError, match=said):
        release(run, "1.0.0")
    assert sorted(p.name for p in folder.iterdir()) == [name] and (folder / name).read_bytes() == readme


def test_an_empty_front_matter_and_empty_keys_of_the_maintainers_are_no_second_header(tmp_path, shared_data):
    import yaml

    run = make_run(tmp_path, shared_data)
    folder = tmp_path / "releases" / "aime24"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("---\n---\n# Ours\n")
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    release(run, "1.0.0")
    card = (folder / "README.md").read_text()
    assert card.count("\n---\n") == 1 and "# Ours\n" in card
    (folder / "README.md").write_text(card.replace("tags:\n- benchfill\n- difficulty\n- irt\n", "tags:\n"))
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    release(run, "1.1.0")
    head = yaml.safe_load((folder / "README.md").read_text().split("\n---\n", 1)[0].removeprefix("---\n"))
    assert head["tags"] == ["benchfill", "difficulty", "irt"]


def test_card_and_changelog_figures_keep_four_places_with_trailing_zeros():
    # 0.101 stood beside 0.1004 (and 0.43 beside 0.4312) and read as less precise
    from benchfill.review.card import changelog_entry, coverage_figures

    before = {"items": 3, "ddm": 0.25, "max_gap": 0.101, "top5_gap_sum": 0.43, "outside_range": 0}
    after = {"items": 4, "ddm": 0.2, "max_gap": 0.1004, "top5_gap_sum": 0.4312, "outside_range": 0}
    entry = changelog_entry("1.0.0", "2026-12-05 UTC", "r", ["x"], "rule", before, after)
    assert "- max gap 0.1010 -> 0.1004, top-5 gap sum 0.4300 -> 0.4312\n" in entry
    assert coverage_figures([0.0, 0.5, 1.0])["items"] == 3  # a count stays a count


def test_one_version_released_from_two_folders_of_one_store_at_once_is_refused_in_one_line(tmp_path, shared_data,
                                                                                          monkeypatch):
    # the folders' locks did not see each other: both checked the store's versions, and the second row met the
    # first's as an IntegrityError traceback. Taking turns on the store, the second finds the first's release.
    import shutil
    import threading
    import time

    import benchfill.release as rel

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "accept")
    other = tmp_path / "elsewhere" / run.name
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("store.db*"))
    (other / "store.db").symlink_to(run / "store.db")  # a second machine's folder on the same store
    real, started = rel._release, threading.Event()

    def slow(board, run_dir, *args):
        if run_dir == run:
            started.set()
            time.sleep(0.5)  # the first holds its turn a while; the second asks meanwhile
        return real(board, run_dir, *args)

    monkeypatch.setattr(rel, "_release", slow)
    got: dict[str, object] = {}
    t = threading.Thread(target=lambda: got.setdefault("first", release(run, "1.0.0", out=tmp_path / "a")))
    t.start()
    assert started.wait(10)
    with pytest.raises(BenchfillError, match=r"^release 1\.0\.0 of aime24 already exists \(this run's store "
                                             r"records it at .*\); versions are immutable$"):
        release(other, "1.0.0", out=tmp_path / "b")
    t.join(10)
    assert verify_release(got["first"].path) == []
    assert not (tmp_path / "b" / "aime24").exists()  # nothing half-made on the refused side
