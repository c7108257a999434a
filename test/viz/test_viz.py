"""VIZ=1 (the trace and the web page, checked in headless Chromium) and PROFILE=1 (the Chrome trace)."""
import gc, json, pathlib, re, shutil, struct, subprocess, tempfile, weakref, zlib
import numpy as np
import pytest
from fusegrad import Tensor, Context, nn, Device
from fusegrad.nn.optim import SGD
from fusegrad.nn.state import get_parameters
from fusegrad.viz import trace, profile, server
from fusegrad.helpers import ansistrip

def _training_step() -> None:
    """One SGD step of a tiny MLP: forward, backward and update kernels."""
    Tensor.manual_seed(0)
    model = [nn.Linear(4, 8), nn.Linear(8, 2)]
    optimizer = SGD(get_parameters(model), lr=0.1)
    x = Tensor(np.random.default_rng(0).standard_normal((5, 4), dtype=np.float32))
    with Tensor.train():
        optimizer.zero_grad()
        x.sequential([model[0], Tensor.relu, model[1]]).sum().backward()
        optimizer.step()

@pytest.fixture
def recorded():
    """The VIZ trace and PROFILE events of one training step (recorded fresh: kernels compiled before are cached)."""
    trace.clear(); profile.clear()
    with Context(VIZ=1, PROFILE=1, CACHELEVEL=0):
        from fusegrad.engine.realize import method_cache
        method_cache.clear()
        _training_step()
    yield trace.data()
    trace.disable(); trace.clear(); profile.clear()

# ---------------------------------------------------------------- the trace

def test_trace_records_schedules_kernels_and_rewrites(recorded):
    assert recorded["schedules"] and recorded["kernels"]
    names = {k["name"] for k in recorded["kernels"]}
    assert any(name.startswith("r") for name in names), names   # the matmuls and sums are reduce kernels
    for kernel in recorded["kernels"]:
        assert kernel["src"] and kernel["uops"] and len(kernel["steps"]) >= 5
        assert kernel["steps"][0]["graph"]["nodes"]
    assert any(step["rules"] for k in recorded["kernels"] for step in k["steps"]), "no rule firing was recorded"
    json.dumps(recorded)   # plain data, servable as is

def test_tracing_keeps_no_graph_alive():
    trace.clear()
    with Context(VIZ=1, CACHELEVEL=0):
        t = Tensor([1.0, 2.0, 3.0]) * 7 + 1
        graph = weakref.ref(t.uop)
        from fusegrad.engine.realize import method_cache
        method_cache.clear()
        t.realize()
        del t
    trace.disable()
    gc.collect()
    assert trace.kernels and graph() is None
    trace.clear()

def test_viz_off_records_nothing():
    trace.clear()
    (Tensor([1.0, 2.0]) * 3 + 2).realize()
    assert trace.data() == {"schedules": [], "kernels": []}

# ---------------------------------------------------------------- PROFILE

def test_profile_trace_has_schedule_compile_and_kernel_spans(recorded, tmp_path):
    path = profile.write_trace(str(tmp_path / "trace.json"))
    events = json.loads(pathlib.Path(path).read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    categories = {e["cat"] for e in spans}
    assert {"schedule", "codegen", "compile", "kernel"} <= categories, categories
    assert all(e["dur"] >= 0 and isinstance(e["ts"], float) for e in spans)
    kernel_names = {k["name"] for k in recorded["kernels"]}
    launched = {e["name"] for e in spans if e["cat"] == "kernel"}
    assert launched and launched <= kernel_names
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"python", Device.DEFAULT} <= tracks   # kernels get a track named after the device they ran on

def _jitted_training_step():
    """A TinyJit'd SGD step of a tiny MLP, called three times (so it is captured and replayed)."""
    from fusegrad import TinyJit
    Tensor.manual_seed(0)
    model = [nn.Linear(4, 8), nn.Linear(8, 2)]
    optimizer = SGD(get_parameters(model), lr=0.1)
    @TinyJit
    @Tensor.train()
    def step(x: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = x.sequential([model[0], Tensor.relu, model[1]]).sum().backward()
        optimizer.step()
        return loss.realize()
    rng = np.random.default_rng(0)
    for _ in range(3): step(Tensor(rng.standard_normal((5, 4), dtype=np.float32)))
    return step, lambda: step(Tensor(rng.standard_normal((5, 4), dtype=np.float32)))

def _kernel_spans(path: str) -> tuple[list[dict], list[dict]]:
    events = [e for e in json.loads(pathlib.Path(path).read_text())["traceEvents"] if e["ph"] == "X"]
    return [e for e in events if e["cat"] == "kernel"], [e for e in events if e["cat"] == "graph"]

def test_profile_has_every_kernel_of_a_jit_graph(tmp_path):
    step, call = _jitted_training_step()
    graph = step.captured.graph
    names = [ansistrip(item.prg.display_name).strip() for item in step.captured.jit_cache]
    profile.clear()
    call()
    assert profile.events() == []                                # PROFILE off: nothing recorded...
    assert graph is None or getattr(graph, "timed", None) is None   # ...and no timed graph built
    with Context(PROFILE=1):
        profile.clear()
        call()
        kernels, graphs = _kernel_spans(profile.write_trace(str(tmp_path / "jit.json")))
    profile.clear()
    assert [k["name"] for k in kernels] == names                  # every kernel of the graph, in order
    assert all(k["dur"] >= 0 for k in kernels)
    if graph is not None:   # the device graph ran them in one call: the kernels lie inside its span
        (whole,) = graphs
        assert str(len(names)) in whole["name"]
        for k in kernels:   # (microseconds; 1e-3 of slack for float rounding of the timestamps)
            assert whole["ts"] - 1e-3 <= k["ts"] and k["ts"] + k["dur"] <= whole["ts"] + whole["dur"] + 1e-3

def test_profile_of_a_graph_that_cant_time_kernels_replays_them_one_by_one(tmp_path, monkeypatch):
    step, call = _jitted_training_step()
    if step.captured.graph is not None: monkeypatch.setattr(step.captured.graph, "profiles_kernels", False)
    with Context(PROFILE=1):
        profile.clear()
        call()
        kernels, graphs = _kernel_spans(profile.write_trace(str(tmp_path / "jit.json")))
    profile.clear()
    assert len(kernels) == len(step.captured.jit_cache) and graphs == []

def test_profile_written_at_exit(tmp_path):
    path = tmp_path / "exit.json"
    code = "from fusegrad import Tensor; (Tensor([1.0, 2.0]) + 1).realize()"
    env = {**__import__("os").environ, "PROFILE": "1", "PROFILE_PATH": str(path)}
    out = subprocess.run([__import__("sys").executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert str(path) in out.stdout
    assert any(e.get("cat") == "kernel" for e in json.loads(path.read_text())["traceEvents"])

# ---------------------------------------------------------------- the page in a real browser

def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if (found := shutil.which(name)): return found
    raise AssertionError("no Chromium found: scripts/install_system.sh installs Debian's chromium for this test")

def _browser(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile_dir:
        command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                   f"--user-data-dir={profile_dir}", "--virtual-time-budget=15000", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=180)

def _png_pixels(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) into an (h, w, channels) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR": header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT": idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * channels)
    out = np.zeros((height, width * channels), np.int32)
    for y in range(height):   # undo the per-row filters (PNG spec, section 9)
        kind, row = raw[y, 0], raw[y, 1:].astype(np.int32)
        prev = out[y - 1] if y else np.zeros_like(row)
        if kind == 0: out[y] = row
        elif kind == 2: out[y] = (row + prev) % 256
        else:
            line = np.zeros_like(row)
            for x in range(len(row)):
                left = line[x - channels] if x >= channels else 0
                up_left = prev[x - channels] if x >= channels else 0
                if kind == 1: predictor = left
                elif kind == 3: predictor = (left + prev[x]) // 2
                else:
                    p = left + prev[x] - up_left
                    pa, pb, pc = abs(p - left), abs(p - prev[x]), abs(p - up_left)
                    predictor = left if pa <= pb and pa <= pc else prev[x] if pb <= pc else up_left
                line[x] = (row[x] + predictor) % 256
            out[y] = line
    return out.reshape(height, width, channels)

def _drawn_fraction(png: bytes) -> float:
    """The share of pixels that differ from the most common (background) colour."""
    pixels = _png_pixels(png)[..., :3].reshape(-1, 3)
    colors, counts = np.unique(pixels, axis=0, return_counts=True)
    return 1.0 - counts.max() / len(pixels)

@pytest.fixture
def page(recorded):
    httpd, url = server.serve_in_background(0)
    yield url, recorded
    httpd.shutdown(); httpd.server_close()

def test_page_lists_the_kernels_and_shows_a_rewrite_step(page):
    url, recorded = page
    result = _browser("--dump-dom", url)
    dom = result.stdout
    assert 'id="summary"' in dom, result.stderr[-2000:]
    listed = set(re.findall(r'<div class="kernel[^"]*" data-id="\d+">([^<]+)</div>', dom))
    assert listed == {k["name"] for k in recorded["kernels"]}
    assert 'id="kernel-name"' in dom and re.search(r"step \d+: .* — [1-9]\d* rules? fired", dom)
    assert '<svg' in dom and 'id="graph-svg"' in dom and dom.count('class="node"') >= 3   # the graph was laid out
    fired = re.search(r'<pre id="fired-rules">([^<]*)</pre>', dom)
    assert fired and re.match(r"\d+x \S", fired.group(1)), fired   # the rules that fired in the shown step
    assert "kernel" in dom and 'id="profile-summary"' in dom   # the PROFILE trace is shown too

def test_screenshot_is_not_blank(page, tmp_path):
    url, _ = page
    shot = tmp_path / "viz.png"
    result = _browser(f"--screenshot={shot}", "--window-size=1280,900", url)
    assert shot.exists(), result.stderr[-2000:]
    assert _drawn_fraction(shot.read_bytes()) > 0.03

def test_blank_page_screenshot_is_detected(tmp_path):
    """The screenshot check itself: an empty page is reported blank."""
    shot = tmp_path / "blank.png"
    _browser(f"--screenshot={shot}", "--window-size=400,300", "about:blank")
    assert _drawn_fraction(shot.read_bytes()) < 0.001
