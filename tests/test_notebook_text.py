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

from deepgemm import heuristic, model
from lab import RESULTS_DIR as LAB_RESULTS_DIR
from lab import cli as lab_cli
from lab import sweeps as lab_sweeps
from tutorial import cli, pitfalls, results, soak, stages, tables

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


def flat(text: str) -> str:
    """Text with every run of whitespace one space: sentences wrap anywhere in a cell's source."""
    return " ".join(text.split())


def readme(block: str | None = None) -> str:
    """The README, or its `<!-- block:start -->` to `<!-- block:end -->` paragraph, flattened."""
    text = (REPO / "README.md").read_text()
    if block is None:
        return flat(text)
    found = re.search(rf"<!-- {block}:start -->(.*)<!-- {block}:end -->", text, re.S)
    assert found, f"README.md lost its {block} markers"
    return flat(found.group(1))


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def span(low: float, high: float, digits: int = 1) -> str:
    """A range as the text states it: "a to b", or "a" where the two agree to `digits` places."""
    a, b = f"{low:.{digits}f}", f"{high:.{digits}f}"
    return a if a == b else f"{a} to {b}"


def test_notebook_07_round_counts_agree_with_the_model():
    nb = notebook("07")
    text = flat(markdown(nb))
    square, skinny = model.tile_rounds(4096, 4096, 128, 256, 2, 132), model.tile_rounds(128, 4096, 128, 256, 2, 132)
    assert (square["cluster_tiles"], square["ctas"] // 2, square["rounds"]) == (256, 64, 4)
    assert "256 cluster tiles, which 64 clusters take in four full rounds" in text
    assert f"{skinny['cluster_tiles']} cluster tiles: {skinny['ctas']} CTAs work on a 132-SM GPU" in text
    below = [model.tile_rounds(m, 4096, 128, 256, 2, 132) for m in (1, 16, 64, 128, 256, 512)]
    assert "Below M = 1024 the output is one round and most SMs idle" in text
    assert all(r["rounds"] == 1 and r["sms_busy_pct"] < 50 for r in below)
    wide, narrow = model.tile_rounds(4096, 2112, 128, 256, 1, 132), model.tile_rounds(4096, 2112, 128, 192, 1, 132)
    tiles, ctas, idle = wide["cluster_tiles"], wide["ctas"], 132 - wide["ctas"]
    full, last = divmod(tiles, 132)
    assert f"is {tiles} tiles: {NUMBER_WORDS[full]} rounds of 132, then {last}" in text
    assert f"(`model.balanced_workers`), {ctas}, and {idle} SMs idle throughout" in text
    assert f"2112 = {2112 // 192} x 192: {narrow['cluster_tiles']} tiles on {narrow['ctas']} SMs" in text
    assert 2112 % 192 == 0 and "model.tile_rounds" in source(cell(nb, "07-rounds-2112"))
    k_tiles = 7168 // 64
    whole, cut = tables.worker_runs(tiles, 132, k_tiles), tables.worker_runs(tiles, 132, k_tiles, stream_k=1)
    busiest = [max(sum(end - begin for _, begin, end in segments) for segments in runs) for runs in (whole, cut)]
    sk_tiles, sk_workers = model.stream_k_schedule(tiles, 132, k_tiles)
    owners = [model.worker_of_k_tile(k, sk_tiles * k_tiles, sk_workers) for k in range(sk_tiles * k_tiles)]
    runs = {owners.count(w) for w in range(sk_workers)}
    each = NUMBER_WORDS[tiles // len(whole)]
    assert f"{tiles} tiles, each 7168 / 64 = {k_tiles} k-tiles deep" in text
    assert f"{len(whole)} CTAs run {each} tiles each, {busiest[0]} k-tiles, while {idle} SMs idle" in text
    assert f"all {len(cut)} SMs run {NUMBER_WORDS[full]} whole tiles" in text
    assert f"the last {sk_tiles} tiles' {sk_tiles * k_tiles} k-tiles" in text
    assert f"cut into {sk_workers} runs of {min(runs)} or {max(runs)}" in text
    assert f"the busiest runs {busiest[1]} k-tiles, {round(100 * (1 - busiest[1] / busiest[0]))}% fewer" in text
    assert "tables.worker_runs" in text and "figures.stream_k_plot" in source(cell(nb, "07-sk-plot"))
    first_cut = tables.cut_tiles(tiles, 132, k_tiles)[0]
    assert f"{NUMBER_WORDS[len(first_cut['workers'])].capitalize()} fp32 partials of a 128 x 256 tile" in text
    assert f"tile {first_cut['tile']}: workers 0 to {first_cut['workers'][-1]}," in stream_text(cell(nb, "07-fixup"))


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


# ---- notebook 07 (issue 25): each number its text states, from the record or the model it comes from -----


def space_row(m: int, n: int, k: int) -> dict:
    """The lab sweep's row of one shape (lab/results/h200/library_space.json)."""
    return next(r for r in results.load("library_space", LAB_RESULTS)["rows"] if (r["m"], r["n"], r["k"]) == (m, n, k))


def busiest(runs: list) -> int:
    """The k-tiles of the busiest worker in `tables.worker_runs`."""
    return max(sum(end - begin for _, begin, end in segments) for segments in runs)


def test_notebook_07_swap_ab_padding_and_times_are_the_records():
    text = flat(markdown(notebook("07")))
    ways = {(w["orientation"], w["width"]): w for w in tables.token_tiles(777)}
    plain, swapped = ways["plain", 128], ways["swapped", 200]
    padding = round(100 - plain["rows_of_c_pct"])
    assert (
        f"777 tokens are {plain['tiles']} x 128 = {plain['rows']} rows plain, {padding}% of them padding, "
        f"but {swapped['tiles']} x 200 = {swapped['rows']} swapped"
    ) in text
    assert "63 or 127 rows of padding" in text and heuristic.BLOCK_M_STEP - 1 == 63 and heuristic.MAX_BLOCK_M - 1 == 127
    sweep = {(s["m"], s["n"]): s for s in tables.space_summary(results.load("library_space", LAB_RESULTS)["rows"])}
    at_777, one, sixteen, big = sweep[777, 4096], sweep[1, 4096], sweep[16, 4096], sweep[1, 28672]
    assert at_777["best"].startswith("swap n200 ")
    said = f"swapped 4 x 200 tiles ran {at_777['swapped_us']:.1f} µs, the best plain configuration"
    assert f"{said} {at_777['plain_us']:.1f}" in text
    assert f"{one['swapped_us']:.1f}" == f"{sixteen['swapped_us']:.1f}"
    assert f"ran {one['swapped_us']:.1f} µs against {one['plain_us']:.1f} and {sixteen['plain_us']:.1f} plain" in text
    assert "n8 " in one["best"] and "n16 " in sixteen["best"]  # "8- and 16-wide token tiles"
    assert "the two are within 5%" in text and 1 < big["plain_us"] / big["swapped_us"] < 1.05
    assert f"{28672 * 4096 * 2 // 2**20} MB read once" in text
    hundred = {w["orientation"]: w for w in tables.token_tiles(100)[::-1]}  # the first of each orientation
    swap, flat_tile = hundred["swapped"], hundred["plain"]
    assert swap["tiles"] == 1 and (
        f"one swapped tile of {swap['rows']} rows ({round(swap['rows_of_c_pct'])}% of them C), "
        f"against {flat_tile['rows']} plain ({round(flat_tile['rows_of_c_pct'])}%)"
    ) in text


def test_notebook_07_stream_k_numbers_are_the_sweep_and_the_schedule():
    text = flat(markdown(notebook("07")))
    pairs = {p["tile"]: p for p in tables.schedule_pairs(space_row(4096, 2112, 7168)["candidates"])}
    wide, fits = pairs["n256 c1"], pairs["n192 c2"]
    said = f"stream-K took {wide['whole_us']:.1f} µs down to {wide['sk1_us']:.1f}, {wide['x_sk']:.2f} times faster"
    assert said in text
    ratio = busiest(tables.worker_runs(288, 132, 112)) / busiest(tables.worker_runs(288, 132, 112, stream_k=1))
    assert f"(the k-tiles said {ratio:.2f}:" in text and wide["x_sk"] < ratio
    assert f"ran {fits['whole_us']:.1f} µs whole and {fits['sk1_us']:.1f} cut" in text
    tuned = results.load("autotune")["rows"]
    streamed = [r for r in tuned if r["config"].get("STREAM_K")]
    assert f"picks stream-K at {len(streamed)} of its {len(tuned)} shapes" in text
    assert all(p["sk2_us"] > p["sk1_us"] for p in pairs.values())  # "slower at every tile"
    two, one = tables.cut_tiles(288, 132, 112, stream_k=2), tables.cut_tiles(288, 132, 112)
    most = busiest(tables.worker_runs(288, 132, 112, stream_k=2))
    said = f"the busiest worker runs {most} k-tiles either way, but {len(two)} tiles are cut"
    assert f"{said} instead of {len(one)}" in text
    price = {s: heuristic.estimate_us(4096, 2112, 7168, heuristic.Tiling(128, 256, stream_k=s), 132) for s in (1, 2)}
    assert "prices stream-K over two rounds below stream-K over one" in text and price[2] < price[1]


def test_notebook_07_sweep_clusters_and_pdl_are_the_records():
    text = flat(markdown(notebook("07")))
    record = results.load("library_space", LAB_RESULTS)
    candidates = [c for r in record["rows"] for c in r["candidates"]]
    assert all(c["passed"] for c in candidates) and f"{len(candidates)} configurations, each verified" in text
    assert f"at {len(record['rows'])} shapes" in text and record["provenance"]["commit"] == "b01e3f2-dirty"
    sweep = tables.space_summary(record["rows"])
    level = [s for s in sweep if s["x_torch"] >= 1]
    assert [(s["m"], s["n"]) for s in level] == [(1, 4096), (16, 4096), (256, 4096), (128, 28672)]
    assert f"reaches `torch.matmul` at {len(level)} of the {len(sweep)} shapes" in text
    rest = [s["x_torch"] for s in sweep if s["x_torch"] < 1 and (s["n"], s["k"]) == (4096, 4096)]
    assert f"its fastest is {min(rest):.2f} to {max(rest):.2f} of it" in text
    fast = [s["best_us"] - s["pdl_us"] for s in sweep if s["best_us"] < heuristic.PDL_BELOW_US]
    slow = [s["pdl_us"] - s["best_us"] for s in sweep if s["best_us"] >= heuristic.PDL_BELOW_US]
    hurt = [d for d in slow if d > 0]
    assert min(fast) > 0 and (
        f"PDL took {min(fast):.1f} to {max(fast):.1f} µs off each of the {len(fast)} shapes whose fastest ran under "
        f"{heuristic.PDL_BELOW_US:.0f} µs, and added {min(hurt):.1f} to {max(hurt):.1f} µs "
        f"at {len(hurt)} of the {len(slow)} above"
    ) in text
    slots = heuristic.CLUSTER_SLOTS[132]
    assert f"{slots[2]} clusters of two fit at once, only {slots[4]} of four" in text
    alone, four = heuristic.Tiling(128, 200, swap_ab=True), heuristic.Tiling(128, 200, 1, 4, swap_ab=True)
    tiles = (heuristic.tiles_of(777, 4096, alone), heuristic.tiles_of(777, 4096, four))
    us = {c["name"]: c["us"] for c in space_row(777, 4096, 4096)["candidates"]}
    assert tiles[0] <= 132 and slots[4] < tiles[1] <= 2 * slots[4] and (
        f"are 32 x 4 = {tiles[0]} tiles, one round; in clusters of four along the tokens, {tiles[1]} cluster tiles on "
        f"{slots[4]} slots, two rounds: {us['swap n200 c1x4 s1 st5']:.1f} µs against {us['swap n200 c1 s1 st5']:.1f}"
    ) in text


def measured_at(m: int, n: int, k: int) -> dict[str, float]:
    """The autotune record's verified candidates at one FP16 shape, by name."""
    row = next(r for r in results.load("autotune")["rows"] if (r["m"], r["n"], r["k"]) == (m, n, k))
    return {c["name"]: c["us"] for c in row["candidates"] if c["passed"]}


def test_notebook_07_heuristic_numbers_are_the_model_and_the_autotune_record():
    from tutorial import autotune

    text = flat(markdown(notebook("07")))
    assert f"({len(heuristic.candidates(777, 4096, 4096, 132))} configurations at 777 x 4096 x 4096)" in text
    row = next(r for r in results.load("autotune")["rows"] if (r["m"], r["n"], r["k"]) == (4096, 2112, 7168))
    timed = {c["name"]: c["us"] for c in row["candidates"]
             if c["passed"] and not c["config"].get("PDL") and not c["config"].get("SHAPE_JIT")}  # fmt: skip
    cheapest = heuristic.candidates(4096, 2112, 7168, 132)[:4]
    model_us = [c.estimate_us for c in cheapest]
    measured = [timed[c.name()] for c in cheapest if c.name() in timed]
    fastest = min(timed, key=timed.get)  # queued
    said = f"the four cheapest are {min(model_us):.1f} to {max(model_us):.1f} µs in the model"
    assert f"{said} and {min(measured):.1f} to {max(measured):.1f} µs when measured" in text
    graphs = {c["name"]: c.get("graph_us") for c in row["candidates"]}
    first = cheapest[0].name()
    assert fastest == row["name"] == first and (  # "the table's entry"
        f"the first is the fastest queued ({timed[fastest]:.1f} µs) and in a graph ({row['graph_us']:.1f} µs), the "
        "table's entry"
    ) in text and row["graph_us"] == graphs[row["name"]] == min(g for g in graphs.values() if g)
    prices = [heuristic.price(4096, 2112, 7168, c.tiling(), 132) for c in cheapest]
    power_us = 2 * 4096 * 2112 * 7168 / (heuristic.POWER_TFLOPS * 1e6) + heuristic.LAUNCH_US
    assert [(c.block_n, c.cluster_m * c.cluster_n, c.stream_k) for c in cheapest[:2]] == [(176, 2, 0)] * 2
    assert all(abs(p.estimate_us - power_us) < 0.05 and p.unpowered_us < p.estimate_us for p in prices[:2])
    assert "The first two, 176-wide tiles in clusters of two, whole, sit at the power bound;" in text
    fourth = cheapest[3]  # a 256-row tile, priced as the third: the same work at the same bound
    assert (fourth.block_m, fourth.block_n) == (256, 96) and prices[3].estimate_us == prices[2].estimate_us
    slower = round(100 * (timed[fourth.name()] / timed[fastest] - 1))
    said = "The fourth, 256-row tiles 96 wide, the model prices as the third (the same work at the same bound)"
    assert f"{said}; it ran {slower}% slower than the fastest" in text
    shown = [((m, n, k), c.name()) for m, n, k in ((1, 4096, 4096), (128, 4096, 4096), (4096, 2112, 7168))
             for c in heuristic.candidates(m, n, k, 132)[:4]]  # fmt: skip
    untimed = [(shape, name) for shape, name in shown if name not in measured_at(*shape)]
    assert not untimed and "did not time" not in text  # the record timed every one shown
    regrets, _ = heuristic.model_accuracy(results.load("autotune")["rows"], 132)
    mean, worst = 100 * (statistics.mean(regrets) - 1), 100 * (max(regrets) - 1)
    over = sum(r > 1.10 for r in regrets)
    assert f"{mean:.1f}% from the fastest on average, {worst:.1f}% at worst, {over} of {len(regrets)} shapes" in text
    shapes = {(r["m"], r["n"], r["k"]) for r in results.load("shapes")["rows"]}
    assert "the model picks it at none of the 102 shapes" in text and len(shapes) == 102
    assert not any(heuristic.choose(m, n, k, 132).stream_k for m, n, k in shapes)
    assert mean < 3 < 10 < worst
    assert "That is within the aim on average (3%) and well over it at worst (10%)" in text
    alone = tables.band_summary(results.load("shapes")["rows"])
    line = next(line for line in alone if (line["ratio"], line["band"]) == ("graph, heuristic", "all"))
    assert f"Alone, it reaches torch at {line['at_least_1']} of {line['rows']} rows in graphs" in text
    probed = load_record("lab/", "kernel_probe_late_trigger")["rows"]
    early = {(r["m"], r["n"]): r["late_trigger"] for r in probed}  # the record's shipped kernel triggered early
    lost = [round(100 * (early[shape]["graph_us"] / early[shape]["other_graph_us"] - 1))
            for shape in ((1, 28672), (16, 6144))]  # fmt: skip
    assert lost == [4, 3] and all(r["late_trigger"]["other_over_shipped"] > 0.995 for r in probed)
    assert "let in at the start instead, grids of 96 and 112 CTAs ran 3 to 4% slower in graphs" in text
    assert f"the model's {autotune.CANDIDATES} cheapest" in text


def test_the_heuristic_picks_moved_since_the_shape_table_are_counted_where_they_are_said():
    """The shape table's heuristic column says "the heuristic alone": README and notebook 07 may say so plainly
    only while every one of its 102 picks (tile, cluster, cut, PDL, the shape compiled in) is the heuristic's
    pick today; once the heuristic moves, they must say how many picks moved since the table was timed."""
    rows = [r for r in results.load("shapes")["rows"] if r["dtype"] == "fp16"]
    picks = [heuristic.config_name(heuristic.choose(r["m"], r["n"], r["k"], 132).config()) for r in rows]
    moved = sum(pick != r["heuristic_config"] for pick, r in zip(picks, rows, strict=True))
    said = readme()
    text = flat(markdown(notebook("07")))
    if moved:
        assert f"{moved} of the {len(rows)} picks moved since" in said and f"{moved} of the {len(rows)} picks" in text
    else:
        assert "picks moved since" not in said and "picks moved since" not in text
        assert "The heuristic alone: " in text and "The heuristic alone (the table switched off): " in said


def test_readme_library_numbers_are_the_shape_table():
    """The README's paragraph on the library quotes the shape table it names: its commit, the rows at or above
    torch in graphs per dtype with median and worst, per call, and the heuristic alone."""
    text = readme("library-numbers")
    record = results.load("shapes")
    assert f"(`shapes.json`, at `{record['provenance']['commit'][:7]}`;" in text
    summary = {(line["ratio"], line["band"]): line for line in tables.band_summary(record["rows"])}
    per_dtype = {d: tables.band_summary([r for r in record["rows"] if r["dtype"] == d]) for d in ("fp16", "bf16")}
    fp16, bf16 = (next(line for line in per_dtype[d] if (line["ratio"], line["band"]) == ("graph, table", "all"))
                  for d in ("fp16", "bf16"))  # fmt: skip
    assert (
        f"FP16 {fp16['at_least_1']} rows at or above torch, median {fp16['median']:.3f}, worst {fp16['worst']:.3f}; "
        f"BF16 {bf16['at_least_1']}, median {bf16['median']:.3f}, worst {bf16['worst']:.3f}"
    ) in text
    call, alone = summary["per call, table", "all"], summary["graph, heuristic", "all"]
    assert f"per call {call['at_least_1']} of {call['rows']}, median {call['median']:.3f}." in text
    assert (
        f"{alone['at_least_1']} of {alone['rows']} in graphs, median {alone['median']:.3f}, worst {alone['worst']:.3f}"
    ) in text


def passed_of(log: Path) -> tuple[str, int]:
    """A GPU test log's commit (from its first line) and its passed tests (summed over its summary lines: a
    sharded log has one per pytest process)."""
    text = log.read_text()
    commit = re.search(r"commit ([0-9a-f]{7})", text.splitlines()[0])
    passed = [int(n) for n in re.findall(r"\b(\d+) passed\b", text)]
    assert commit and passed, f"{log.name} has no commit in its first line or no summary"
    return commit.group(1), sum(passed)


@pytest.mark.parametrize("gpu", ["h100-80gb-hbm3", "h200"])
def test_readme_torch_numbers_are_the_records(gpu: str):
    """The README's paragraph on the torch operator quotes, per GPU, its GPU test logs, the host cost and the
    training run, each with the commit it was recorded at."""
    text = next(part for part in readme("torch-numbers").split("(`results/") if part.startswith(f"{gpu}/`)"))
    records, lab_records = results.RESULTS_DIR.parent / gpu, LAB_RESULTS.parent / gpu
    logs = (records / f"gpu_{t}.txt" for t in ("torch", "fast"))
    (torch_at, torch_n), (fast_at, fast_n) = (passed_of(log) for log in logs)
    assert f"passed its {torch_n} GPU tests (`gpu_torch.txt`, at `{torch_at}`)" in text
    assert f"the C++ path its {fast_n} (`gpu_fast.txt`, at `{fast_at}`)" in text
    host = results.load("op_host", lab_records)
    ours = next(r["host_us"] for r in host["rows"] if r["way"] == "deepgemm.gemm" and r["path"] == "C++")
    torch_us = [r["host_us"] for r in host["rows"] if r["way"] == "torch.matmul"]
    at = host["provenance"]["commit"][:7]
    said_host = f"{ours:.1f} µs from C++, {min(torch_us):.1f} to {max(torch_us):.1f} for `torch.matmul`"
    assert f"{said_host} (`op_host.json`, at `{at}`)" in text
    train = results.load("train", records)
    ratios = [r["x_torch"] for r in train["rows"] if r["linear"] == "deepgemm"]
    at = train["provenance"]["commit"][:7]
    assert f"its step {min(ratios):.3f}x to {max(ratios):.3f}x of nn.Linear's (`train.json`, at `{at}`)" in text
    assert ("short of the aim" in text) == (min(ratios) < 1.0)


def test_readme_forced_capability_runs_are_the_records():
    """What the README says ran as other GPUs: each forced capability's bench, GPU tests and nbval exited 0 in
    its log, and the sm_80 kernel's GPU tests passed in the number it gives."""
    said = readme()
    section = said[said.index("## Which GPUs run what") :]
    folder = re.search(r"passed on the [^(]+\(`results/([^/]+)/forced_cc_\*\.txt`\)", section)
    assert folder, "the README no longer names the forced-capability logs"
    records = results.RESULTS_DIR.parent / folder.group(1)
    for cc in re.search(r"at ([\d.]+), ([\d.]+) and ([\d.]+),", section).groups():
        log = (records / f"forced_cc_{cc}.txt").read_text()
        assert f"compute capability {cc} (DEEPGEMM_CC" in log
        for part in ("bench", "tests", "nbval"):
            assert f"## {part}: exit 0" in log, f"forced_cc_{cc}.txt: {part} did not pass"
    _, passed = passed_of(records / "gpu_sm80.txt")
    assert f"the sm_80 kernel its {passed} GPU tests (`gpu_sm80.txt`)" in section


def test_notebook_07_shape_table_numbers_are_the_record():
    text = flat(markdown(notebook("07")))
    record = results.load("shapes")
    rows = record["rows"]
    summary = {(line["ratio"], line["band"]): line for line in tables.band_summary(rows)}
    said = {
        "graph, table": "In graphs, with the table's pick, {n} of the {rows} rows are at 1.0x or better",
        "graph, heuristic": "The heuristic alone: {n} rows",
        "per call, table": "Per call, with the table: {n} rows",
    }
    for label, start in said.items():
        line = summary[label, "all"]
        start = start.format(n=line["at_least_1"], rows=line["rows"])
        assert f"{start}, median {line['median']:.3f}, worst {line['worst']:.3f}" in text
    line = summary["graph, table", "all"]
    assert "are not met" in text and (line["at_least_1"] < 0.9 * line["rows"] or line["median"] < 1.03)
    mid = [summary["graph, table", band]["worst"] for band in ("33-500", "501-1500")]
    worst_mid = [line["below"][0].split()[1].replace("x", " x ")
                 for line in (summary["graph, table", b] for b in ("33-500", "501-1500"))]  # fmt: skip
    assert f"the widest gap, {mid[0]:.2f}, at {worst_mid[0]} (above)" in text
    assert f"{mid[1]:.2f} at worst from 501 to 1500 ({worst_mid[1]})" in text
    medians = [f"{summary['graph, table', band]['median']:.3f}" for band in ("1-32", "33-500", "501-1500", ">1500")]
    said = "**The medians** in graphs: {} at M 1 to 32, {} at 33 to 500, {} at 501 to 1500, {} above".format(*medians)
    assert said in text

    def x(dtype: str, m: int, n: int, k: int, field: str = "x_torch_graph") -> float | str:
        return next(r for r in rows if (r["dtype"], r["m"], r["n"], r["k"]) == (dtype, m, n, k))[field]

    sweep = [r for r in rows if r["dtype"] == "fp16" and (r["n"], r["k"]) == (4096, 4096)]
    ours, torch = ([r[f] for r in sweep if r["m"] <= 8] for f in ("graph_us", "torch_graph_us"))
    level = [r["x_torch_graph"] for r in sweep if r["m"] >= 384]
    assert min(level) > 0.9 and max(level) < 1.1 and (
        f"up to M = 8 at N = K = 4096 the call runs {span(min(ours), max(ours))} µs where `torch.matmul` takes "
        f"{span(min(torch), max(torch))}; from M = 384 on the two are within 10% "
        f"({min(level):.2f} to {max(level):.2f})"
    ) in text
    big = [r["x_torch_graph"] for r in rows if r["n"] == 28672 and r["m"] <= 32]
    behind = [ratio for ratio in big if ratio < 1]
    said = f"{len(behind)} of the {len(big)} rows of M 1 to 32 at 28672 x 4096, {span(min(behind), max(behind), 2)}"
    assert said in text
    stream = {(b["dtype"], b["n"], b["k"]): b for b in tables.m1_bandwidth(rows)}
    ours_tbs, torch_tbs = (stream["fp16", 28672, 4096][f] / 1e3 for f in ("graph_gbs", "torch_graph_gbs"))
    assert f"streams {ours_tbs:.2f} TB/s where `torch.matmul` streams {torch_tbs:.2f}" in text

    def both(m: int, n: int, k: int, field: str = "x_torch_graph") -> str:
        fp16, bf16 = (f"{x(d, m, n, k, field):.2f}" for d in ("fp16", "bf16"))
        return f"at {fp16} in both" if fp16 == bf16 else f"at {fp16} and {bf16}"

    assert (
        f"512 x 2112 x 7168 {both(512, 2112, 7168)}, 256 x 2112 x 7168 {both(256, 2112, 7168)} (FP16, BF16), "
        f"128 x 2112 x 7168 {both(128, 2112, 7168)}"
    ) in text
    lab = load_record("lab/", "pingpong")["rows"]
    before = next(r for r in lab if (r["m"], r["n"], r["k"]) == (2048, 7168, 2048))
    entry = before["candidates"][0]  # the table's entry when the lab ran: whole 224-wide tiles
    assert entry["name"].startswith("n224 ") and " pp" not in entry["name"]
    pingpong = [r[f] for r in rows if (r["m"], r["n"], r["k"]) == (2048, 7168, 2048)
                for f in ("config", "heuristic_config")]  # fmt: skip
    alone = both(2048, 7168, 2048, "x_torch_graph_heuristic").removeprefix("at ")
    assert all(" pp " in f"{c} " for c in pingpong) and (
        f"ping-pong ([13]) took 2048 x 7168 x 2048 {both(2048, 7168, 2048).replace('at ', 'to ', 1)} (its entry "
        f"before, whole 224-wide tiles, ran {before['torch_graph_us'] / entry['graph_us']:.2f} beside it in the "
        f"lab's sweep). The heuristic alone picks ping-pong there too ({alone})"
    ) in text
    same_entry = {r["config"] for r in rows if (r["m"], r["n"], r["k"]) == (512, 7168, 2048)}
    assert len(same_entry) == 1 and (
        f"**BF16 alone** at 512 x 7168 x 2048 ({x('bf16', 512, 7168, 2048):.2f}; "
        f"{x('fp16', 512, 7168, 2048):.2f} in FP16, the same entry)"
    ) in text
    tuned = {(r["m"], r["n"], r["k"]): r for r in results.load("autotune")["rows"]}
    entry = tuned[192, 4096, 4096]
    ours, theirs = ([x(d, 192, 4096, 4096, f) for d in ("fp16", "bf16")] for f in ("graph_us", "torch_graph_us"))
    assert {x(d, 192, 4096, 4096, "config") for d in ("fp16", "bf16")} == {entry["name"]} and (
        f"**192 x 4096 x 4096** {both(192, 4096, 4096)} (one entry: {ours[0]:.1f} and {ours[1]:.1f} µs beside "
        f"torch's {span(min(theirs), max(theirs))}; {entry['graph_us']:.1f} µs in autotune's"
    ) in text
    assert entry["torch_graph_us"] / entry["graph_us"] > 1.1  # the same entry ahead of torch in autotune's run
    same = {r["config"] for r in rows if (r["m"], r["n"], r["k"]) == (64, 4096, 7168)}
    assert len(same) == 1 and (
        f"and 64 x 4096 x 7168 ({x('bf16', 64, 4096, 7168):.2f}; {x('fp16', 64, 4096, 7168):.2f} in FP16)"
    ) in text
    best = tuned[128, 2112, 7168]
    assert f"At 128 the fastest tiling autotune found ran {best['torch_graph_us'] / best['graph_us']:.2f}x" in text
    at_512 = next(r for r in rows if (r["dtype"], r["m"], r["n"], r["k"]) == ("fp16", 512, 2112, 7168))
    table_tile = at_512["config"].removesuffix(" jit").removesuffix(" pdl")
    behind = round(100 * (at_512["graph_us"] / at_512["torch_graph_us"] - 1))
    entries = [r["config"] for r in rows if (r["m"], r["n"], r["k"]) in ((512, 2112, 7168), (256, 2112, 7168))]
    split = [r["config"] for r in rows if (r["m"], r["n"], r["k"]) == (256, 2112, 7168)]
    assert all(entry.startswith("swap m64 n128 ") for entry in entries) and (
        "At 512 and 256 the table's entries are cuBLAS's geometry swapped (`swap m64 n128`: 64 weight rows by 128 "
        f"tokens, as `nvjet_sm90_hsh_64x128_64x8_1x2` tiles C^T), {behind}% behind cuBLAS at 512, and at 256 split "
        "in clusters of two along K ([12])."
    ) in text and table_tile.startswith("swap m64 n128 c1 ") and all(" c1 k2 " in entry for entry in split)
    assert behind <= 1
    below = sorted(r["x_torch_graph"] for r in rows if r["x_torch_graph"] < 1)
    assert f"{sum(v >= 0.97 for v in below)} of the {len(below)} rows below 1.0x are within 3% of it" in text
    blocks = {(b["dtype"], b["m"]): b["x_torch_graph"] for b in record["block"]}
    for m in (128, 2048, 1):
        low, high = (f"{ratio:.2f}" for ratio in sorted(blocks[dtype, m] for dtype in ("fp16", "bf16")))
        assert (f"{low}x at M = {m}" if low == high else f"{low} to {high}x at M = {m}") in text
    gemms = [x(d, 1, n, k) for d in ("fp16", "bf16") for n, k in ((6144, 4096), (28672, 4096), (4096, 14336))]
    assert f"(all but 4096 x 4096) run {min(gemms):.2f} to {max(gemms):.2f}x of `torch.matmul`" in text
    assert min(x(dtype, 1, 4096, 4096) for dtype in ("fp16", "bf16")) > max(gemms)
    judged = [b for b in stream.values() if b["aim"] != "-"]
    reached = {dtype: {(b["n"], b["k"]) for b in judged if b["aim"] == "yes" and b["dtype"] == dtype}
               for dtype in ("fp16", "bf16")}  # fmt: skip
    met = reached["fp16"] & reached["bf16"]
    assert reached["bf16"] == reached["fp16"] == met
    said = f"{NUMBER_WORDS[len(met)].capitalize()} of the {NUMBER_WORDS[len(judged) // 2]} weights"
    assert f"{said} of 32 MB or more reach it in both dtypes; 4096 x 4096 and 6144 x 4096 stream" in text
    assert {(b["n"], b["k"]) for b in judged} - met == {(4096, 4096), (6144, 4096)}
    slow = [stream[d, n, 4096]["graph_gbs"] / 1e3 for d in ("fp16", "bf16") for n in (4096, 6144)]
    assert f"stream {span(min(slow), max(slow), 2)} TB/s (still ahead of `torch.matmul` at 4096 x 4096)" in text
    assert all(stream[d, 4096, 4096]["graph_gbs"] > stream[d, 4096, 4096]["torch_graph_gbs"] for d in ("fp16", "bf16"))
    under = [b["graph_gbs"] / 1e3 for b in judged if b["aim"] == "no"]
    weights = [b["weight_mb"] for b in judged if b["aim"] == "no"]
    assert f"M = 1 at {min(weights):.0f} to {max(weights):.0f} MB**: {span(min(under), max(under), 2)} TB/s" in text


def test_notebook_07_autotune_ranks_its_finalists_in_graphs_with_pdl_on_and_off():
    from tutorial import autotune

    text = flat(markdown(notebook("07")))
    rows = results.load("autotune")["rows"]
    finals = [[c for c in r["candidates"] if "graph_us" in c and not c["config"].get("SHAPE_JIT")] for r in rows]
    assert all(r["ranked_by"] == "graph" for r in rows)
    winners = [min(final, key=lambda c: c["graph_us"]) for final in finals]
    assert all(r["name"] in (w["name"], f"{w['name']} jit") for r, w in zip(rows, winners))
    queued = [min(final, key=lambda c: c["us"]) for final in finals]
    moved = [q["graph_us"] / w["graph_us"] - 1 for q, w in zip(queued, winners) if q["name"] != w["name"]]
    assert f"then every candidate within {round(100 * (autotune.GRAPH_MARGIN - 1))}% of the fastest" in text
    assert f"and the {NUMBER_WORDS[autotune.GRAPH_FINALISTS]} fastest with PDL flipped, in CUDA graphs" in text
    assert (
        f"at {len(moved)} of the {len(rows)} shapes not the fastest queued, which there ran a median "
        f"{100 * statistics.median(moved):.1f}% slower in a graph, up to {100 * max(moved):.1f}%"
    ) in text
    pairs = []  # (PDL on, PDL off) of the same tile, both timed in graphs
    for final in finals:
        by_name = {c["name"]: c for c in final}
        for on in (c for c in final if c["config"].get("PDL")):
            off = heuristic.config_name(heuristic.config_from_fields({**on["config"], "PDL": 0}))
            pairs.append((on, by_name[off]))
    assert len(pairs) >= autotune.GRAPH_FINALISTS * len(rows)
    gains = [off["graph_us"] / on["graph_us"] - 1 for on, off in pairs]
    short = [off["graph_us"] / on["graph_us"] - 1 for on, off in pairs if off["graph_us"] < heuristic.PDL_BELOW_US]
    assert (
        f"PDL won {sum(g > 0 for g in gains)} of the {len(gains)} pairs (a median change of "
        f"{100 * statistics.median(gains):.1f}%), {sum(g > 0 for g in short)} of the {len(short)} under "
        f"{heuristic.PDL_BELOW_US:.0f} µs (by {100 * statistics.median(short):.1f}%); "
        f"{sum(bool(r['config'].get('PDL')) for r in rows)} entries keep it"
    ) in text
    contests = [r["shape_jit"] for r in rows]  # every winner against itself compiled for its shape
    gains = [c["without_graph_us"] / c["graph_us"] - 1 for c in contests]
    short = [g for g, c in zip(gains, contests) if c["without_graph_us"] < heuristic.PDL_BELOW_US]
    kept = [r for r in rows if r["config"].get("SHAPE_JIT")]
    assert len(kept) == sum(g > 0 for g in gains) and (
        f"the compiled-in shape ran faster at {len(kept)} of the {len(rows)} shapes (a median "
        f"{100 * statistics.median(gains):.1f}%, {100 * statistics.median(short):.1f}% under "
        f"{heuristic.PDL_BELOW_US:.0f} µs), and those entries keep it"
    ) in text


def test_notebook_07_says_which_records_show_determinism():
    nb = notebook("07")
    text = flat(markdown(nb))
    test = "test_library_stream_k_matches_reference_and_repeats_bit_for_bit_on_every_stream"
    gpu_tests = (REPO / "tests" / "test_gpu_library.py").read_text()
    body, helper = (gpu_tests[gpu_tests.index(f"def {name}(") :] for name in (test, "_repeats_bit_for_bit"))
    body, helper = (part[: part.index("\ndef ", 1)] for part in (body, helper))
    assert "four streams" in text and "_repeats_bit_for_bit(" in body and "range(4)" in helper
    assert ".view(cupy.uint8) == first.view(cupy.uint8)" in helper
    assert f"`tests/test_gpu_library.py::{test}`" in text and test in source(cell(nb, "07-determinism-live"))
    assert "the records of this kernel are the evidence" in text
    log = results.RESULTS_DIR / "gpu_library.txt"  # quiet: only a failure is named
    suite = log.read_text()
    header = suite.splitlines()[0]
    (ran, passed), total = passed_of(log), int(re.search(r"(\d+) tests", header).group(1))
    failed = re.findall(r"^FAILED tests/test_gpu_library.py::(\w+)", suite, flags=re.M)
    assert "tests/test_gpu_library.py " in header and test not in failed and passed + len(failed) == total
    said = f"`results/h200/gpu_library.txt` holds it among the library's GPU tests, run at `{ran}`"
    assert said in text and f"{passed} of {total} passed, it among them" in text and not failed
    record = results.load("stability")
    soaked = [r for r in record["rows"] if r["run"] == soak.RUN]
    soak_commit = record["provenance"]["commit"]
    assert {r["run_date"] for r in soaked} == {record["provenance"]["date"]}
    table = {(r["m"], r["n"], r["k"]): r["name"] for r in results.load("autotune")["rows"]}
    configs = {(r["m"], r["n"], r["k"], r["dtype"]): r["config"] for r in soaked}
    unsoaked = [shape for shape, name in table.items()
                if any(configs.get((*shape, dtype)) != name for dtype in ("fp16", "bf16"))]  # fmt: skip
    if unsoaked:  # a soak of an earlier table: the text says so, and how many entries it did not run
        assert f"is of the kernel and autotune table at `{soak_commit[:7]}`" in text
        assert f"({len(unsoaked)} of this table's {len(table)} entries differ from it; not yet soaked)" in text
    else:  # every entry of the present table soaked, by its name (tile, cluster, schedule, PDL, SHAPE_JIT)
        assert f"is of this kernel and this autotune table at `{soak_commit[:7]}`" in text
    assert len(soaked) == 2 * len(table) and all(r["mismatched"] == 0 for r in soaked)
    streams, threads = {r["streams"] for r in soaked}, {r["threads"] for r in soaked}
    assert len(streams) == len(threads) == 1 and (
        f"its configuration at each of its {len(table)} shapes, FP16 and "
        f"BF16, {len(soaked)} cases on {NUMBER_WORDS[min(streams)]} streams from {NUMBER_WORDS[min(threads)]} "
        f"threads for {sum(r['seconds'] for r in soaked):.0f} s, {sum(r['launches'] for r in soaked):,} launches, "
        f"none differing"
    ) in text
    shown = stream_text(cell(nb, "07-determinism"))
    assert f"deepgemm.gemm soak: {len(soaked)} cases" in shown
    runs = shown.split("# compute-sanitizer on ")[1:]
    tuned_at = results.load("autotune")["provenance"]["commit"]  # the library's records come from one commit
    assert len(runs) == 8 and all(f"commit {tuned_at}" in run for run in runs)
    assert all("CLUSTER_K=" in run for run in runs[6:]) and not any("CLUSTER_K=" in run for run in runs[:6])
    for tool in ("memcheck", "racecheck", "synccheck"):
        assert all(f"## {tool}\nexit 0\n" in run for run in runs)
    assert all(run.count("ERROR SUMMARY: 0 errors") == 2 and "0 hazards displayed (0 errors, 0 warnings)" in run
               for run in runs)  # fmt: skip
    assert "compute-sanitizer (memcheck, racecheck, synccheck)" in text
    assert "with swap AB at M = 777 and 33 in clusters of four along the tokens" in text and any(
        all(mark in run for mark in ("shapes 777x4096x520,33x1000x1000 ", "SWAP_AB=1", "CLUSTER_N=4", "STREAM_K=1"))
        for run in runs
    )
    assert "plain stream-K over one and two rounds" in text and all(
        any(f"STREAM_K={rounds}" in run and "SWAP_AB" not in run for run in runs) for rounds in (1, 2)
    )
    assert "split-K with swap AB at M = 17" in text and any(
        all(mark in run for mark in ("shapes 17x", "SPLIT_K=", "SWAP_AB=1")) for run in runs
    )
    assert ("then splits in the cluster, two slices swapped at M = 17 and 9 and four slices over several rounds at "
            "M = 300") in text and all(
        any(all(mark in run for mark in marks) for run in runs[6:])
        for marks in (("shapes 17x2112x7168,9x", "CLUSTER_K=2", "SWAP_AB=1"), ("shapes 300x", "CLUSTER_K=4"))
    )
    assert "256-row tiles under stream-K, swapped at M = 777 and 300 and plain at M = 1000" in text and all(
        any(all(mark in run for mark in marks) and ("SWAP_AB" in run) is swapped for run in runs)
        for marks, swapped in ((("shapes 777x2112x1000,300x", "BLOCK_M=256", "STREAM_K=1"), True),
                               (("shapes 1000x", "BLOCK_M=256", "STREAM_K=1"), False))
    )  # fmt: skip


def test_notebook_08_shows_each_stability_run_under_its_own_provenance():
    nb = notebook("08")
    record = results.load("stability")
    first, soak_run = record["runs"][0], record["provenance"]
    shown = stream_text(cell(nb, "bd3c4b63"))
    v5, soaked = shown.split(results.recorded_banner(soak_run, live=False))
    assert v5.startswith(results.recorded_banner(first, live=False)) and first["commit"] != soak_run["commit"]
    assert "v5_fused fp16 4096x4096x4096, one stream" in v5 and "soak" not in v5
    assert soaked.startswith("\ndeepgemm.gemm soak: ") and "v5_fused" not in soaked
    rows = [r for r in record["rows"] if r["run"] == soak.RUN]
    assert all(r["mismatched"] == 0 for r in rows) and (
        f"the autotune table's configuration at each of its {len({(r['m'], r['n'], r['k']) for r in rows})} shapes "
        f"in FP16 and BF16 for {sum(r['seconds'] for r in rows):.0f} s: {sum(r['launches'] for r in rows):,} "
        f"launches, none differing"
    ) in flat(markdown(nb))


def test_notebook_07_pingpong_numbers_are_the_lab_record_and_the_table():
    """[13] The median saving per tile past a worker's first, over the lab's pairs of 128 x 128 tiles timed in
    graphs without and with ping-pong, and the table's entries that take it."""
    text = flat(markdown(notebook("07")))
    saved = []
    for row in load_record("lab/", "pingpong")["rows"]:
        by_name = {c["name"]: c for c in row["candidates"]}
        for name, timed in by_name.items():
            if " pp" in name and name.startswith(("n128 ", "swap n128 ")):
                tiling = heuristic.tiling_of(heuristic.config_from_name(name))
                rounds = -(-heuristic.tiles_of(row["m"], row["n"], tiling) // heuristic.slots(tiling, 132))
                saved.append((by_name[name.replace(" pp", "")]["graph_us"] - timed["graph_us"]) / (rounds - 1))
    said = f"{len(saved)} pairs in graphs) it hid a median {statistics.median(saved):.2f} µs a tile"
    assert f"pingpong.json`, {said}" in text
    assert f"{heuristic.PINGPONG_TILE_US:.2f}" == f"{statistics.median(saved):.2f}"
    tuned = results.load("autotune")["rows"]
    taken = [r for r in tuned if r["config"].get("PINGPONG")]
    assert f"The table takes it at {len(taken)} of its {len(tuned)} shapes" in text
    split = [r for r in tuned if r["config"].get("CLUSTER_K", 1) > 1]  # [12], a split in the cluster
    assert f"the table takes it at {len(split)} of its {len(tuned)} shapes." in text
    shapes = {(r["m"], r["n"], r["k"]) for r in results.load("shapes")["rows"]}
    assert f"the model alone at {sum(heuristic.choose(*shape, 132).pingpong for shape in shapes)}, pricing" in text


def test_notebook_07_stays_about_2500_words():
    """Short for what it teaches: the shapes, then a paragraph and a diff per block of the library kernel, [5]
    to [13], and the shape table on a second Hopper."""
    assert 2200 <= words(notebook("07")) <= 2900


def test_notebook_07_walks_the_library_diff_before_the_shape_table():
    nb = notebook("07")
    position = {c["id"]: i for i, c in enumerate(nb["cells"])}
    shape_table = next(c["id"] for c in code_cells(nb) if "tables.band_summary(rows)" in source(c))
    walked = set()
    for c in code_cells(nb):
        for marker in re.findall(r'diff_excerpt\("library", ((?:"\[\d+\]",? ?)+)', source(c)):
            assert position[c["id"]] < position[shape_table]
            blocks = re.findall(r"\[(\d+)\]", marker)
            walked |= set(blocks)
            assert f"[{min(blocks, key=int)}]" in stream_text(c)
    assert walked == {"5", "6", "7", "8", "9", "10", "11", "12", "13"}
    assert "[13]" in (REPO / "deepgemm" / "kernels" / "gemm_sm90.cu").read_text()


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


def test_notebook_07_h100_reading_holds_for_the_records():
    """Notebook 07's reading of the H100's records, which its cell prints: what the paragraph says of them."""
    text = flat(markdown(notebook("07")))
    h100 = results.gpu_directory("NVIDIA H100 80GB HBM3")
    summary = {name: {line["ratio"]: line for line in tables.band_summary(results.load(name, h100)["rows"])
                      if line["band"] == "all"} for name in ("shapes_untabled", "shapes")}  # fmt: skip
    bare, tabled = summary["shapes_untabled"], summary["shapes"]
    assert "the model's picks stay a little ahead of `torch.matmul` at the median in graphs, with a tail below" in text
    assert 1 < bare["graph, table"]["median"] < 1.05 and bare["graph, table"]["worst"] < 0.95
    assert "the H100's own table lifts that tail and wins more rows per call" in text
    assert tabled["graph, table"]["worst"] > bare["graph, table"]["worst"]
    assert tabled["per call, table"]["at_least_1"] > bare["per call, table"]["at_least_1"]
    assert "The model's first choice sits further from the fastest than on the H200's" in text
    h100_regret, h200_regret = (heuristic.model_accuracy(results.load("autotune", d)["rows"], 132)[0]
                                for d in (h100, results.RESULTS_DIR))  # fmt: skip
    assert statistics.fmean(h100_regret) > statistics.fmean(h200_regret)


def test_notebook_07_the_heuristics_whole_pick_is_read_from_the_shape_table():
    """The model's first choice against autotune's best as a caller meets it: both picks timed whole in the
    shape table's own run (`tables.pick_regret`), the numbers the prose gives."""
    text = flat(markdown(notebook("07")))
    regret = {line["dtype"]: line for line in tables.pick_regret(results.load("shapes")["rows"])}
    worst = max(line["worst_pct"] for line in regret.values())
    assert (
        f"whole, beside the table's pick in graphs, {regret['fp16']['mean_pct']:.2f}% and "
        f"{regret['bf16']['mean_pct']:.2f}% (FP16, BF16), {worst:.1f}% at worst ("
    ) in text
    over = {line["worst_row"].split()[1] for line in regret.values() if line["over_10pct"]}
    assert all(line["over_10pct"] <= 1 for line in regret.values()) and len(over) == 1  # one shape, named
    assert f"at worst ({over.pop().replace('x', ' x ')}, the only shape over 10%" in text
