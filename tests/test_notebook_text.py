"""What the notebooks say, held to the records they cite and to the code they call (issue 24, deliverable 5).

Reads the notebooks' JSON on the CPU: the first line's claim about the stored outputs, the banners and
commands those outputs print, the harness commands and functions the cells name, and the numbers the text
states, each compared with the record or the model it comes from.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import shlex
import statistics
from pathlib import Path
from types import ModuleType

import pytest

from deepgemm import model
from lab import RESULTS_DIR as LAB_RESULTS_DIR
from lab import cli as lab_cli
from lab import sweeps as lab_sweeps
from tutorial import cli, pitfalls, results, stages, tables

REPO = Path(__file__).resolve().parent.parent
LAB_RESULTS = LAB_RESULTS_DIR  # the lab's records, which notebooks 05, 06 and 09 read


NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
HARNESS_PACKAGES = ("deepgemm", "tutorial", "lab", "stages")


def notebook(name: str) -> dict:
    path = next(p for p in NOTEBOOKS if p.name.startswith(name))
    return json.loads(path.read_text())


def source(cell: dict) -> str:
    return "".join(cell["source"])


def cell(nb: dict, cell_id: str) -> dict:
    return next(c for c in nb["cells"] if c["id"] == cell_id)


def stream_text(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o["output_type"] == "stream")


def markdown(nb: dict) -> str:
    return "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "markdown")


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def words(nb: dict) -> int:
    return len(re.findall(r"\S+", markdown(nb)))


def load_record(directory: str, name: str) -> dict:
    return results.load(name, LAB_RESULTS if directory.startswith("lab/") else results.RESULTS_DIR)


ids = [p.stem for p in NOTEBOOKS]


# ---- 1. what the stored outputs are, and the banners in them -------------------------------------------

RECORD_CITED = re.compile(r"`((?:lab/)?results/h200/)(\w+)\.json` \(([^,]+), commit `([0-9a-f]{7,})`\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_first_line_names_the_records_the_outputs_come_from(path):
    nb = json.loads(path.read_text())
    first = source(nb["cells"][0]).splitlines()[0]
    assert first.startswith("*Outputs: executed without a GPU"), first
    assert "live run" not in first
    cited = RECORD_CITED.findall(first)
    assert cited, f"{path.name}: the first line names no record with its date and commit"
    for directory, name, date, commit in cited:
        prov = load_record(directory, name)["provenance"]
        assert prov["gpu"] in first
        assert (date, commit) == (prov["date"], prov["commit"][: len(commit)]), f"{path.name}: {name}.json"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_stored_outputs_are_those_of_a_run_without_a_gpu(path):
    nb = json.loads(path.read_text())
    assert source(nb["cells"][0]).startswith("*Outputs: executed without a GPU")
    for c in code_cells(nb):
        assert not any(o["output_type"] == "error" for o in c["outputs"]), f"{path.name} {c['id']}"
        text = stream_text(c)
        assert "A GPU is present" not in text, f"{path.name} {c['id']}"
        for line in text.splitlines():
            if line.startswith("RECORDED results"):
                assert line.startswith("RECORDED results (no GPU here): "), f"{path.name} {c['id']}: {line}"
        if source(c).startswith("if LIVE:"):
            assert c["outputs"] == [], f"{path.name} {c['id']}: a live cell has stored outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_banners_come_from_the_harness_not_typed(path):
    nb = json.loads(path.read_text())
    for c in code_cells(nb):
        assert "RECORDED results" not in source(c), f"{path.name} {c['id']}: use results.recorded_banner"
        assert "no GPU here" not in source(c), f"{path.name} {c['id']}"


def test_the_banner_says_no_gpu_only_without_one():
    prov = results.load("progression")["provenance"]
    assert "(no GPU here)" in results.recorded_banner(prov, live=False)
    assert "(no GPU here)" not in results.recorded_banner(prov, live=True)


# ---- 5. commands: the ones printed, named in the text, and run by the live cells -------------------------

OLD_PROGRAMS = ("python -m deepgemm", "python -m lab.v5_hiding", "python -m lab.rounds")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_a_printed_command_that_is_gone_comes_with_todays(path):
    nb = json.loads(path.read_text())
    for c in code_cells(nb):
        lines = stream_text(c).splitlines()
        for i, line in enumerate(lines):
            if not any(old in line for old in OLD_PROGRAMS) or line.startswith("(note: "):
                continue
            after = lines[i + 1] if i + 1 < len(lines) else ""
            assert line.startswith("(command: ") and after.startswith(("(today: ", "(note: ")), (
                f"{path.name} {c['id']}: {line}"
            )


def todays_command(text: str) -> None:
    """A command of today's tutorial or lab: it parses (its subcommand, suite and sweep exist)."""
    argv = shlex.split(text)
    assert argv[:2] == ["python", "-m"], text
    parsers = {"tutorial": cli.build_parser, "lab": lab_cli.build_parser}
    if argv[2] == "tutorial.target":
        return
    assert argv[2] in parsers, f"not a program of today's tutorial: {text}"
    try:
        parsers[argv[2]]().parse_args(argv[3:])
    except SystemExit as err:
        raise AssertionError(f"does not parse today: {text}") from err


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_the_commands_printed_as_todays_exist(path):
    nb = json.loads(path.read_text())
    for c in code_cells(nb):
        for today in re.findall(r"^\(today: (.*)\)$", stream_text(c), flags=re.M):
            todays_command(today)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_text_and_code_name_only_todays_commands_and_files(path):
    nb = json.loads(path.read_text())
    text = "\n".join(source(c) for c in nb["cells"])
    assert "python -m deepgemm" not in text, f"{path.name}: the harness is python -m tutorial"
    for spelled in re.findall(r"`(python -m (?:tutorial|lab)\b[^`]*)`", text):
        if "..." not in spelled:
            todays_command(spelled)
        else:  # an elided command: its program and subcommand exist
            program, sub = spelled.split()[2:4]
            parser = {"tutorial": cli.build_parser, "lab": lab_cli.build_parser}[program]()
            assert sub in parser._subparsers._group_actions[0].choices, spelled
    for file in re.findall(r"`((?:deepgemm|tutorial|lab|stages|notes|results)/[\w/.-]+\.(?:py|cu|md|json|txt))`", text):
        assert (REPO / file).exists() or (LAB_RESULTS / Path(file).name).exists(), f"{path.name}: {file}"


def call_arguments(nb: dict, names: tuple[str, ...]) -> list[list[str]]:
    """The argument lists the cells pass to `cli(...)` or `lab_cli(...)`, evaluated as they would be."""
    env = {"DTYPE": "fp16", "SHAPE": (4096, 4096, 4096), "str": str}
    found = []
    for c in code_cells(nb):
        for node in ast.walk(ast.parse(source(c).replace("%matplotlib inline", ""))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                found.append((node.func.id, eval(compile(ast.Expression(node.args[0]), "<cell>", "eval"), env)))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_live_cells_run_commands_that_exist(path):
    nb = json.loads(path.read_text())
    for program, argv in call_arguments(nb, ("cli", "lab_cli")):
        parser = cli.build_parser() if program == "cli" else lab_cli.build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as err:
            raise AssertionError(f"{path.name}: {program}({argv}) does not parse") from err
        if program == "cli" and args.command == "bench":
            assert args.suite in cli.SUITES
        if program == "lab_cli" and args.command == "sweep":
            assert args.sweep in lab_sweeps.SWEEPS


def imported_names(tree: ast.AST) -> dict[str, object]:
    """What each name a notebook imports is, where it comes from the project's own packages."""
    names: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in HARNESS_PACKAGES:
                    names[alias.asname or alias.name.split(".")[0]] = importlib.import_module(alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in HARNESS_PACKAGES:
            module = importlib.import_module(node.module)
            for alias in node.names:
                try:
                    names[alias.asname or alias.name] = getattr(module, alias.name)
                except AttributeError:
                    names[alias.asname or alias.name] = importlib.import_module(f"{node.module}.{alias.name}")
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_every_harness_function_the_cells_call_exists(path):
    """The `if LIVE:` cells run only on a GPU: whatever they (and the others) take from the project exists."""
    nb = json.loads(path.read_text())
    tree = ast.parse("\n".join(source(c).replace("%matplotlib inline", "") for c in code_cells(nb)))
    names = imported_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = names.get(node.value.id)
            if isinstance(owner, ModuleType):
                assert hasattr(owner, node.attr), f"{path.name}: {node.value.id}.{node.attr} does not exist"


TEXT_MODULES = {
    "model": "deepgemm.model",
    "heuristic": "deepgemm.heuristic",
    "jit": "deepgemm.jit",
    "stages": "tutorial.stages",
    "sass": "tutorial.sass",
    "pitfalls": "tutorial.pitfalls",
    "tables": "tutorial.tables",
    "results": "tutorial.results",
    "diff": "tutorial.diff",
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_the_functions_the_text_names_exist(path):
    """The exercises name functions to call (`stages.compile_report(...)`): each exists where its name says."""
    for owner, name in re.findall(r"`[^`]*?\b(\w+)\.(\w+)\(", markdown(json.loads(path.read_text()))):
        if owner in TEXT_MODULES:
            assert hasattr(importlib.import_module(TEXT_MODULES[owner]), name), f"{path.name}: {owner}.{name}"


def test_notebook_05_runs_no_removed_suite_and_times_v4s_order_from_the_ablation():
    nb = notebook("05")
    code = "\n".join(source(c) for c in code_cells(nb))
    assert '"raster"' not in code
    assert 'show_recorded("ablation"' in source(cell(nb, "05-09"))


# ---- 2. notebook 03: v2's unswizzled conflict ------------------------------------------------------------


def test_notebook_03_counts_v2s_conflict_with_pitfalls():
    nb = notebook("03")
    row_bytes = stages.load("v2").DEFAULTS.block_k * 2
    ways, swizzled = pitfalls.ldmatrix_wavefronts(row_bytes, False), pitfalls.ldmatrix_wavefronts(row_bytes, True)
    assert "8-way" not in markdown(nb)
    counting = cell(nb, "03-ways")
    assert "pitfalls.ldmatrix_wavefronts" in source(counting)
    assert f"a {ways}-way conflict" in stream_text(counting)
    assert f"*Check:* {ways} and {swizzled}." in markdown(nb)
    assert "4- or 8-way" in (REPO / "stages/v2_mma_sync/README.md").read_text() and ways == 4


# ---- 3. tile rounds, from the model ---------------------------------------------------------------------


def test_notebook_07_round_counts_agree_with_the_model():
    nb = notebook("07")
    text = markdown(nb)
    assert "66 clusters" not in text and "two-thirds" not in text
    narrow = model.tile_rounds(4096, 2112, 128, 192, 2, 132)
    said = re.search(
        r"the (\d+) cluster tiles take (\w+) rounds .* (\d+) CTAs, and a tenth of the (\d+) SMs idle",
        text.replace("\n", " "),
    )
    assert said, "the 4096 x 2112 sentence moved"
    tiles, rounds, ctas, sms = said.groups()
    assert (int(tiles), ctas, sms) == (narrow["cluster_tiles"], str(narrow["ctas"]), "132")
    assert {"three": 3}[rounds] == narrow["rounds"]
    assert round(1 - narrow["ctas"] / 132, 1) == 0.1
    assert 2112 % 192 == 0 and model.ceil_div(2112, 256) == 9 and 2112 - 8 * 256 == 256 // 4
    square, skinny = model.tile_rounds(4096, 4096, 128, 256, 2, 132), model.tile_rounds(128, 4096, 128, 256, 2, 132)
    assert "256 cluster tiles,\nwhich 64 clusters take in four full rounds" in text
    assert (square["cluster_tiles"], square["ctas"] // 2, square["rounds"]) == (256, 64, 4)
    assert "16 cluster tiles: 32 CTAs" in text and (skinny["cluster_tiles"], skinny["ctas"]) == (16, 32)
    rounds_cell = cell(nb, "07-rounds-2112")
    assert "model.tile_rounds" in source(rounds_cell)


def test_notebook_06_exercise_agrees_with_the_model():
    big = model.tile_rounds(8192, 8192, 128, 256, 2, 132)
    assert "*Check:* 1024 cluster tiles, 128 CTAs, 16 full rounds." in markdown(notebook("06"))
    assert (big["cluster_tiles"], big["ctas"], big["rounds"]) == (1024, 128, 16)


# ---- 4. notebook 06: two cluster records, two kernels ----------------------------------------------------


def test_notebook_06_says_which_v5_each_cluster_record_measured():
    nb = notebook("06")
    text = source(cell(nb, "bafe2065")).replace("\n", " ")
    sweep, ablated = results.load("v5_cluster", LAB_RESULTS), results.load("ablation")
    assert f"commit `{sweep['provenance']['commit'][:7]}`" in text
    assert f"commit `{ablated['provenance']['commit'][:7]}`" in text
    assert "different versions" in text
    ratios = [r["x_tflops"] for d in ("fp16", "bf16")
              for r in tables.variant_table(sweep["rows"], 2, name="CLUSTER_M", dtype=d)
              if tables.variant_value(r["stage"], "CLUSTER_M") == 1]  # fmt: skip
    low, high = re.search(r"clusters of one ran at (\d\.\d\d) to (\d\.\d\d) of clusters of two", text).groups()
    assert (float(low), float(high)) == (round(min(ratios), 2), round(max(ratios), 2))
    one = next(r for r in ablated["rows"] if r.get("ablated_stage") == "v5_fused" and r.get("knobs") == "CLUSTER_M=1")
    assert "level" in text and round(one["x_shipped"], 2) == 1.00
    assert "clusters of 1: " in stream_text(cell(nb, "06-clusters-ablation"))


def test_notebook_06_ablation_times_are_the_records():
    recorded = {round(r["us"], 1) for r in results.load("ablation")["rows"] if r.get("ablated_stage") == "v5_fused"}
    stated = {float(x) for x in re.findall(r"\b(\d{3}\.\d)\b", source(cell(notebook("06"), "9c98f227")))}
    assert stated and stated <= recorded, sorted(stated - recorded)


def test_notebook_05_tile_order_numbers_are_the_records():
    text = source(cell(notebook("05"), "05-12")).replace("\n", " ")
    v4 = tables.variant_table(
        [{**r, "stage": f"{r['stage']} GROUP_M={tables.variant_value(r.get('knobs', '')) or 8}"}
         for r in results.load("ablation")["rows"] if r.get("ablated_stage") == "v4_pipeline_swizzle"
         and (r["ablation"].startswith("as shipped") or tables.variant_value(r.get("knobs", "")) is not None)],
        8, dtype="fp16")  # fmt: skip
    row_major = next(r for r in v4 if tables.variant_value(r["stage"]) == 1)
    assert "costs v4 under 1% at 4096^3" in text and 0.99 < row_major["x_tflops"] < 1.0
    v5 = {
        (tables.variant_value(r["stage"]), r["m"]): r["x_tflops"]
        for r in tables.variant_table(results.load("v5_group_m", LAB_RESULTS)["rows"], 16, dtype="fp16")
    }
    assert "row-major order costs that v5 about 3%" in text and round(1 - v5[1, 8192], 2) == 0.03
    assert "`GROUP_M=8` lands about 1% below" in text and round(1 - v5[8, 8192], 2) == 0.01
    runs = [
        r["tflops"]
        for name, where in (
            ("progression", results.RESULTS_DIR),
            ("epilogue", results.RESULTS_DIR),
            ("v5_cluster", LAB_RESULTS),
            ("v5_group_m", LAB_RESULTS),
        )
        for r in tables.rows_for(tables.shipped_rows(results.load(name, where)["rows"]), dtype="fp16", shape=8192)
    ]
    assert "a little more than the spread" in text and max(runs) / min(runs) < 1 / v5[1, 8192]


def test_notebook_07_level_shapes_are_the_records():
    rows = [r for r in results.load("shapes")["rows"] if r["m"] >= 1024 and (r["m"], r["n"]) not in ((4097, 4097),)
            and (r["m"], r["n"], r["k"]) != (3000, 5000, 700)]  # fmt: skip
    ratios = [r["x_torch"] for r in rows]
    text = markdown(notebook("07")).replace("\n", " ")
    assert "0.93 to 1.02, median 0.994" in text
    assert (round(min(ratios), 2), round(max(ratios), 2), round(statistics.median(ratios), 3)) == (0.93, 1.02, 0.994)
    assert all(int(re.search(r"n(\d+)", r["config"]).group(1)) >= 128 for r in rows)  # "BLOCK_N 128 to 256"


# ---- 6. notebook 06 teaches today's v5; 07 walks the library's additions --------------------------------


def test_notebook_06_teaches_only_v5s_four_techniques():
    text = markdown(notebook("06"))
    for library_only in ("SPLIT_K", "split-K", "SWAP_AB", "swap AB", "CLUSTER_N", "MN_MAJOR", "SiLU", "BLOCK_N 192",
                         "[5]", "[6]", "[7]", "[8]", "[9]"):  # fmt: skip
        assert library_only not in text, library_only
    assert 1350 <= words(notebook("06")) <= 1650


def test_notebook_05_stays_about_1500_words():
    assert 1350 <= words(notebook("05")) <= 1650


def test_notebook_07_walks_the_library_diff_before_the_shape_table():
    nb = notebook("07")
    position = {c["id"]: i for i, c in enumerate(nb["cells"])}
    shape_table = next(c["id"] for c in code_cells(nb) if "results.SHAPE_COLUMNS" in source(c))
    walked = set()
    for c in code_cells(nb):
        for marker in re.findall(r'diff_excerpt\("library", ((?:"\[\d\]",? ?)+)', source(c)):
            assert position[c["id"]] < position[shape_table]
            walked |= set(re.findall(r"\[(\d)\]", marker))
            assert "[" + min(re.findall(r"\[(\d)\]", marker)) + "]" in stream_text(c)
    assert walked == {"5", "6", "7", "8", "9"}


# ---- line numbers of the source-level profile -----------------------------------------------------------


def test_a_source_profile_with_moved_lines_says_whose_lines_they_are():
    record = results.load("profile_source")
    commit = record["provenance"]["commit"][:7]
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for i, c in enumerate(nb["cells"]):
            found = re.search(r'source_instructions\(source\["rows"\], "(v\d)"\)', source(c))
            if c["cell_type"] != "code" or not found:
                continue
            row = next(r for r in record["rows"] if r["stage"] == stages.stage_name(found.group(1)))
            today = stages.kernel_path(row["stage"]).read_text().splitlines()
            moved = any(line["line"] > len(today) or today[line["line"] - 1].strip() != line["source"].strip()
                        for line in row["lines"])  # fmt: skip
            if moved:
                assert f"`{commit}`" in source(nb["cells"][i - 1]), f"{path.name}: {found.group(1)}'s lines moved"
