"""nbgrader metadata derived from the solution notebooks (tools/grading/meta.py); no nbgrader needed."""

import copy
import json
import re

import nbformat
import pytest

from tools.build import nbtools
from tools.grading import meta

SOLUTIONS = nbtools.chapter_files(nbtools.SOLUTIONS)
NAMES = [p.name for p in SOLUTIONS]
# nbgrader 0.9.6, nbgraderformat/v3.json
SCHEMA_KEYS = {
    "schema_version",
    "grade",
    "locked",
    "solution",
    "task",
    "grade_id",
    "points",
    "checksum",
    "cell_type",
}
GRADE_ID = re.compile(r"^[a-zA-Z0-9_\-]+$")


def _solution():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 · Test chapter"),
        nbformat.v4.new_code_cell("import course_utils as cu"),
        nbformat.v4.new_code_cell(
            "class Given:\n    def f(self):\n        return 1\nprint(Given().f())"
        ),
        nbformat.v4.new_code_cell(
            "class Mine(Given):\n    def g(self):\n        ### BEGIN SOLUTION\n"
            "        return 2\n        ### END SOLUTION",
            metadata={"tags": ["exercise"]},
        ),
        nbformat.v4.new_code_cell("cu.checks.check_mine(Mine)", metadata={"tags": ["self-check"]}),
        nbformat.v4.new_code_cell(
            "### BEGIN SOLUTION\nresult = Mine().g()\n### END SOLUTION",
            metadata={"tags": ["exercise"]},
        ),
        nbformat.v4.new_code_cell(
            "cu.checks.check_mine(result)", metadata={"tags": ["self-check"]}
        ),
        nbformat.v4.new_markdown_cell(
            "## Exercises\n\n**Q1.** Why?\n\n<!-- BEGIN ANSWER -->\nBecause.\n"
            "<!-- END ANSWER -->\n\n**Q2.** How?\n\n<!-- BEGIN ANSWER -->\nSo.\n"
            "<!-- END ANSWER -->"
        ),
    ]
    return nb


def _by_id(nb, chapter="ch99"):
    return {
        m["grade_id"]: (cell.cell_type, cell.source)
        for cell, m in zip(nb.cells, meta.derive(nb, chapter))
        if m
    }


def test_each_kind_of_cell_gets_its_nbgrader_role():
    nb = _solution()
    wanted = meta.derive(nb, "ch99")
    assert [m and m["grade_id"] for m in wanted] == [
        None,
        None,
        "ch99_given_Given",
        "ch99_Mine",
        "ch99_check_mine__Mine",
        "ch99_result",
        "ch99_check_mine__result",
        "ch99_answer_exercises_q1",
    ]
    given, exercise, check, _, _, answer = wanted[2:]
    assert (given["locked"], given["grade"], given["solution"]) == (True, False, False)
    assert (exercise["solution"], exercise["grade"], exercise["locked"]) == (True, False, False)
    assert (check["grade"], check["locked"], check["solution"], check["points"]) == (
        True,
        True,
        False,
        meta.POINTS_PER_CHECK,
    )
    assert (answer["grade"], answer["solution"], answer["task"]) == (True, True, False)
    assert answer["points"] == 2 * meta.POINTS_PER_ANSWER  # two answer regions in one cell


def test_ids_do_not_depend_on_cell_positions():
    nb = _solution()
    before = _by_id(nb)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("A new paragraph."))
    nb.cells.insert(5, nbformat.v4.new_code_cell("x = 1  # a new demo cell"))
    assert _by_id(nb) == before


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_real_chapter_ids_survive_an_inserted_cell(path):
    nb = nbtools.read(path)
    before = _by_id(nb, meta.chapter_id(path.name))
    for where in (2, len(nb.cells) // 2, len(nb.cells)):
        moved = copy.deepcopy(nb)
        moved.cells.insert(where, nbformat.v4.new_code_cell("print('an inserted cell')"))
        assert _by_id(moved, meta.chapter_id(path.name)) == before


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_every_chapter_gets_valid_unique_metadata_with_answers_and_tests(path):
    nb = nbtools.read(path)
    chapter = meta.chapter_id(path.name)
    wanted = meta.derive(nb, chapter)
    ids = [m["grade_id"] for m in wanted if m]
    assert len(ids) == len(set(ids)), "grade ids must be unique in a notebook"
    for cell, m in zip(nb.cells, wanted):
        if m is None:
            continue
        assert set(m) <= SCHEMA_KEYS and {"schema_version", "grade", "locked", "solution"} <= set(m)
        assert (
            m["schema_version"] == 3
            and GRADE_ID.match(m["grade_id"])
            and m["grade_id"].startswith(chapter + "_")
        )
        assert ("points" in m) == m["grade"] and (not m["grade"] or m["points"] > 0)
        if (
            cell.cell_type == "markdown"
        ):  # nbgrader: a markdown grade cell must also be a solution cell
            assert m["grade"] and m["solution"] and nbtools.BEGIN_ANSWER in cell.source
    solution_cells = [
        m for c, m in zip(nb.cells, wanted) if m and m["solution"] and c.cell_type == "code"
    ]
    test_cells = [m for c, m in zip(nb.cells, wanted) if m and m["grade"] and c.cell_type == "code"]
    assert solution_cells and test_cells
    assert len(test_cells) == sum("self-check" in c.metadata.get("tags", []) for c in nb.cells)
    assert all(m["locked"] for m in test_cells)


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_every_answer_region_lies_in_an_nbgrader_solution_cell(path):
    """nbgrader refuses a solution region outside a solution cell (the bug of issue 12)."""
    nb = nbtools.read(path)
    for cell, m in zip(nb.cells, meta.derive(nb, meta.chapter_id(path.name))):
        lines = [line.strip() for line in cell.source.split("\n")]
        if nbtools.BEGIN_CODE in lines or nbtools.BEGIN_ANSWER in lines:
            assert m and m["solution"], cell.source[:80]


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_nbgrader_delimiters_match_only_our_marker_lines(path):
    """The nbgrader config's delimiters find a region wherever a line contains them: only markers may."""
    markers = {nbtools.BEGIN_CODE, nbtools.END_CODE, *meta.ANSWER_MARKERS.values()}
    for cell in meta.source_notebook(nbtools.read(path), path.name).cells:
        for line in cell.source.split("\n"):
            if any(d in line for d in meta.DELIMITERS):
                assert line.strip() in markers, (
                    f"{path.name}: nbgrader would take {line!r} for an answer marker"
                )
    config = meta.CONFIG_FILE.read_text()
    for delimiter in meta.DELIMITERS:
        assert f'"{delimiter}"' in config
    assert all(any(d in m for d in meta.DELIMITERS) for m in markers)
    assert not any(d in "### BEGIN HIDDEN TESTS ### END HIDDEN TESTS" for d in meta.DELIMITERS)
    assert f'text_stub = "{nbtools.ANSWER_STUB}"' in config
    assert "\\n".join(nbtools.CODE_STUB) in config


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_apply_is_idempotent_and_is_stale_sees_changes(path):
    nb = nbtools.read(path)
    chapter = meta.chapter_id(path.name)
    once = copy.deepcopy(nb)
    meta.apply(once, chapter)
    twice = copy.deepcopy(once)
    assert meta.apply(twice, chapter) is False
    assert nbtools.dumps(twice) == nbtools.dumps(once)
    assert not meta.is_stale(once, path.name)
    tampered = copy.deepcopy(once)
    first = next(c for c in tampered.cells if "nbgrader" in c.metadata)
    first.metadata["nbgrader"]["points"] = 99
    assert meta.is_stale(tampered, path.name)


def test_stale_metadata_is_removed_and_other_metadata_kept():
    nb = _solution()
    meta.apply(nb, "ch99")
    nb.cells[5].source = "result = Mine().g()"  # no longer an exercise
    nb.cells[5].metadata["scrolled"] = True
    assert meta.apply(nb, "ch99") is True
    assert "nbgrader" not in nb.cells[5].metadata and nb.cells[5].metadata["scrolled"] is True
    assert nb.cells[3].metadata["tags"] == ["exercise"]


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_exercise_notebooks_carry_no_nbgrader_metadata(path):
    nb = nbtools.read(path)
    meta.apply(nb, meta.chapter_id(path.name))
    exercise = nbtools.make_exercise(nb, path.name)
    assert all("nbgrader" not in c.metadata for c in exercise.cells)
    assert '"nbgrader"' not in nbformat.writes(exercise)


def test_a_nameless_exercise_or_a_duplicate_id_is_reported():
    nb = _solution()
    nb.cells[5].source = "### BEGIN SOLUTION\nprint(Mine().g())\n### END SOLUTION"
    with pytest.raises(meta.MetaError, match="cell 5"):
        meta.derive(nb, "ch99")
    nb = _solution()
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "def Mine():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION"
        )
    )
    with pytest.raises(meta.MetaError, match="ch99_Mine"):
        meta.derive(nb, "ch99")


def test_source_notebook_for_nbgrader_links_the_exercise_and_drops_solution_only_cells():
    nb = _solution()
    nb.cells.insert(
        2,
        nbformat.v4.new_code_cell("print('instructor only')", metadata={"tags": ["solution-only"]}),
    )
    nbtools.set_headers(nb, "solutions", "99_test.ipynb")
    source = meta.source_notebook(nb, "99_test.ipynb")
    text = json.dumps(source)
    assert "instructor only" not in text
    assert (
        "/notebooks/99_test.ipynb" in source.cells[0].source
        and "/solutions/" not in source.cells[0].source
    )
    assert not meta.is_stale(source, "99_test.ipynb")
    assert nbtools.read  # the solution itself is unchanged:
    assert "nbgrader" not in json.dumps(nb)


def test_course_directory_has_config_and_every_chapter(tmp_path):
    written = meta.make_course(tmp_path, "ps1")
    assert [p.name for p in written] == NAMES
    config = (tmp_path / "nbgrader_config.py").read_text()
    assert str(nbtools.ROOT) in config and str(meta.CONFIG_FILE) in config
    compile(config, "nbgrader_config.py", "exec")
    settings = meta.CONFIG_FILE.read_text()
    assert "db_assignments" not in settings and "db_students" not in settings  # gone in 0.6
    assert "FreshChecks" in settings
    compile(settings, "nbgrader_config.py", "exec")


def test_the_course_config_restores_names_stops_and_encrypts(tmp_path):
    """Tampered cells are put back before nbgrader's own sanitizers see them, StopsExecute runs the
    kernel where Execute did (the guard right after it), one limit serves both, and kernels talk
    to nbgrader over an encrypted transport (no warning to print)."""
    meta.make_course(tmp_path, "ps1", chapters=("01",))
    config = " ".join(meta.CONFIG_FILE.read_text().split())
    assert "sanitize_preprocessors = [ ClearOutput, RestoreFromRelease, DeduplicateIds," in config
    assert "autograde_preprocessors = [ StopsExecute, FreshChecks, IgnorePattern," in config
    assert "c.Execute.timeout = 300" in config and "FreshChecks.cell_timeout" not in config
    assert 'c.KernelManager.transport_encryption = "auto"' in config
    assert "db_url" not in config  # the default: gradebook.db beside it
    assert "db_url" not in (tmp_path / "nbgrader_config.py").read_text()


def test_a_course_for_another_gradebook_names_it_once(tmp_path, capsys):
    url = "postgresql+psycopg://grader@localhost/grades"
    meta.main(["course", str(tmp_path), "--chapters", "01", "--db", url])
    meta.set_db_url(tmp_path, url)  # as make grade DB=... does on a course that names it
    config = (tmp_path / "nbgrader_config.py").read_text()
    assert config.count(f"c.CourseDirectory.db_url = {url!r}") == 1
    assert config.index("db_url") > config.index("load_subconfig(")  # after the settings: it wins
    compile(config, "nbgrader_config.py", "exec")


def test_course_directory_of_some_chapters(tmp_path, capsys):
    written = meta.make_course(tmp_path, "week1", chapters=("01", "03"))
    assert [p.name for p in written] == [n for n in NAMES if n[:2] in ("01", "03")]
    assert sorted(p.name for p in (tmp_path / "source" / "week1").iterdir()) == [
        p.name for p in written
    ]
    with pytest.raises(ValueError, match=r"two-digit chapter numbers among 01, .*got '1'"):
        meta.make_course(tmp_path / "other", chapters=("1",))
    with pytest.raises(SystemExit):
        meta.main(["course", str(tmp_path / "cli"), "--chapters", "42"])
    assert "got '42'" in capsys.readouterr().err


def test_the_guides_points_table_is_what_the_command_prints(capsys):
    from pathlib import Path

    meta.main(["points"])
    printed = capsys.readouterr().out
    guide = Path(__file__).resolve().parents[1] / "docs" / "instructors.md"
    assert printed in guide.read_text(encoding="utf-8"), (
        "the instructors' guide's points table (under 'Grading with nbgrader') is stale: run "
        "`make exercises`"
    )


def test_renamed_and_missing_notebooks_are_named_in_words(tmp_path, capsys):
    (tmp_path / "source" / "a").mkdir(parents=True)
    for name in ("01_x.ipynb", "02_y.ipynb"):
        (tmp_path / "source" / "a" / name).write_text("{}")
    folder = tmp_path / "submitted" / "bob" / "a"
    folder.mkdir(parents=True)
    (folder / "01_x-Copy1.ipynb").write_text("{}")
    assert meta.check_submissions(tmp_path, "a") == [
        "bob: 01_x.ipynb is missing, and 01_x-Copy1.ipynb looks like it renamed; rename it "
        "(or run with --fix), or this chapter scores 0",
        "bob: 02_y.ipynb is missing (no notebook of that chapter): this chapter scores 0",
    ]
    assert meta.main(["submissions", str(tmp_path), "--assignment", "a", "--fix"]) == 0
    assert "bob: 01_x-Copy1.ipynb renamed to 01_x.ipynb" in capsys.readouterr().out
    assert (folder / "01_x.ipynb").exists()


@pytest.mark.parametrize("path", SOLUTIONS, ids=NAMES)
def test_one_score_box_per_written_question(path):
    """formgrader shows one score box per graded markdown cell: each holds one question's answer,
    worth the 2 points the README promises (questions sharing a cell made boxes of 8-14)."""
    boxes = [
        (c.metadata[meta.KEY]["grade_id"], meta._answer_count(c), c.metadata[meta.KEY]["points"])
        for c in nbtools.read(path).cells
        if c.cell_type == "markdown" and c.metadata.get(meta.KEY, {}).get("grade")
    ]
    assert boxes and all(
        (count, points) == (1, meta.POINTS_PER_ANSWER) for _, count, points in boxes
    ), boxes
