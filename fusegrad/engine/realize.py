"""Run schedules: lower each ScheduleItem to a runner (a compiled kernel or a copy), run it, and
keep ``GlobalCounters`` and the DEBUG output.

``capturing`` holds hooks (the JIT) that see every ExecItem as it runs.
"""
from __future__ import annotations
import atexit, collections, concurrent.futures, dataclasses, os, sys, threading, time
from dataclasses import dataclass, field
from typing import Any, Callable
from fusegrad.device import Device, Buffer, MallocAllocator
from fusegrad.helpers import CACHELEVEL, DEBUG, PROFILE, VIZ, GlobalCounters, colored, ansilen, ansistrip
from fusegrad.viz import profile
from fusegrad.uop.ops import UOp, Ops, sym_infer
from fusegrad.renderer import ProgramSpec
from fusegrad import codegen   # (called as codegen.get_program: tests substitute it there)
from fusegrad.engine import program_cache
_genuine_get_program = codegen.get_program

# Realizing is one critical section per process: scheduling rebinds *every* live tensor to the buffers its graph
# became, and those buffers are allocated before their kernels run, so a second thread that looked in between saw a
# "realized" tensor whose buffer was not written yet (`.item()` from two threads read 0.0). Tensor.realize/schedule
# and the reads of Tensor.numpy hold this lock; it is re-entrant because a realize can realize again (the JIT, a
# numpy() of a non-contiguous view). Building lazy graphs needs no lock. See docs/decisions.md (Engine: threads).
realize_lock = threading.RLock()

class Runner:
    """Something that runs on a device with buffers: a compiled kernel or a copy."""
    def __init__(self, display_name: str, device: str, op_estimate: Any = 0, mem_estimate: Any = 0):
        self.display_name, self.device, self.op_estimate, self.mem_estimate = display_name, device, op_estimate, mem_estimate
    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
        raise NotImplementedError

class CompiledRunner(Runner):
    """A rendered kernel, compiled (through the on-disk cache) and loaded."""
    def __init__(self, p: ProgramSpec, precompiled: bytes | None = None):
        self.p = p
        device = Device[p.device]
        if DEBUG >= 4: print(p.src)
        self.lib = precompiled if precompiled is not None else _timed_compile(device.compiler, p.name, p.src)
        self._prg = device.runtime(p.name, self.lib)
        # a kernel without variables has fixed launch sizes: worked out once, not on every launch (eager
        # dispatch and JIT=2 replay go through here once per kernel)
        self._fixed_dims = None
        if not p.vars:
            global_size, local_size = p.launch_dims({})
            self._fixed_dims = (tuple(global_size), tuple(local_size) if local_size is not None else None)
        super().__init__(colored(p.name, "cyan" if p.name.startswith("r") else "blue"), p.device, p.op_estimate, p.mem_estimate)
    def __reduce__(self): return self.__class__, (self.p, self.lib)
    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
        if (dims := self._fixed_dims) is not None:
            return self._prg(*[b._buf for b in bufs], global_size=dims[0], local_size=dims[1], vals=(), wait=wait)
        values_by_name = {v.expr: val for v, val in var_vals.items()}
        missing = [v.arg[0] for v in self.p.vars if v.arg[0] not in values_by_name]
        if missing: raise RuntimeError(f"kernel {self.p.name} needs values for variables {missing}")
        global_size, local_size = self.p.launch_dims({v: values_by_name[v.arg[0]] for v in self.p.vars})
        return self._prg(*[b._buf for b in bufs], global_size=tuple(global_size),
                         local_size=tuple(local_size) if local_size is not None else None,
                         vals=tuple(values_by_name[v.arg[0]] for v in self.p.vars), wait=wait)

class BufferCopy(Runner):
    """Copy one buffer into another, possibly across devices: directly between two devices of one backend that
    can (``Allocator._transfer``: CUDA peer copies), else through host memory."""
    def __init__(self, nbytes: int, dest_device: str, src_device: str):
        super().__init__(colored(f"copy {nbytes:8d}, {dest_device[:7]:>7s} <- {src_device[:7]:7s}", "yellow"), dest_device, 0, nbytes)
    def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
        dest, src = bufs[0], bufs[1]
        start = time.perf_counter()
        if dest.nbytes != src.nbytes: raise RuntimeError(f"copy between buffers of {src.nbytes} and {dest.nbytes} bytes")
        readinto = getattr(src.ensure_allocated().allocator, "readinto", None)
        if type(dest.ensure_allocated().allocator) is type(src.allocator) and dest.allocator._transfer is not None:
            dest.allocator._transfer(dest._buf, src._buf, dest.nbytes, src.allocator)
        elif readinto is not None and isinstance(dest.ensure_allocated().allocator, MallocAllocator):
            readinto(src._buf, dest.allocator._as_buffer(dest._buf))   # a file (DISK) read straight into host memory
        else: dest.copyin(src.as_buffer(allow_zero_copy=True))
        return time.perf_counter() - start if wait else None

method_cache: dict[tuple[str, UOp, Any], CompiledRunner] = {}

def get_runner(device: str, ast: UOp) -> CompiledRunner:
    """The compiled kernel for ``ast`` on ``device`` (compiled once per process, and the binary
    once per machine through the disk cache)."""
    key = _cache_key(device, ast)
    if (runner := method_cache.get(key)) is not None: return runner
    # instances of one device ("CPU:1", "CPU:2", the shards of a multi-device tensor) share the
    # compiled program: it is generated and compiled once, and only loaded for each instance
    shared_key = _cache_key(_device_base(device), ast)
    if (shared := method_cache.get(shared_key)) is not None:
        runner = CompiledRunner(dataclasses.replace(shared.p, device=device), precompiled=shared.lib)
    else:
        runner = method_cache[shared_key] = CompiledRunner(_program(device, ast))
    method_cache[key] = runner
    return runner

def _program(device: str, ast: UOp, unsaved: list | None = None) -> ProgramSpec:
    """The rendered kernel for ``ast`` on ``device``: from the disk (engine/program_cache.py, keyed by the AST, so a
    warm process runs no codegen) or generated now and stored. Devices without a compile cache, VIZ traces and
    CACHELEVEL=0 always generate, and so does a substituted ``codegen.get_program`` (the key hashes the real code
    generator's files: what another function makes must neither be served from nor stored under it). With
    ``unsaved``, a generated program is appended there for the caller to store with others in one transaction."""
    key = None
    if CACHELEVEL >= 1 and not VIZ and Device[device].compiler.cachekey is not None and codegen.get_program is _genuine_get_program:
        key = program_cache.program_key(ast, Device[device].renderer.options)
        if (program := program_cache.load(key, device)) is not None: return program
    program = dataclasses.replace(codegen.get_program(ast, Device[device].renderer), device=device)
    if unsaved is not None: unsaved.append((key, program))
    else: program_cache.store(key, program)
    return program

def _cache_key(device: str, ast: UOp) -> tuple:
    # the renderer's options hold its target, limits and the codegen flags' current values
    return (device, ast, Device[device].renderer.options)

def _device_base(device: str) -> str:
    """The device without its instance number: ``"CPU:2"`` -> ``"CPU"`` (``"CPU:LLVM"`` is a different renderer and stays)."""
    base, _, instance = device.rpartition(":")
    return base if base and instance.isdigit() else device

@dataclass
class ExecItem:
    """A runner with its buffers: what the JIT records and replays."""
    prg: Runner
    bufs: list[Buffer]
    var_vals: dict[UOp, int] = field(default_factory=dict)
    def run(self, var_vals: dict[UOp, int] | None = None, wait: bool = False, do_update_stats: bool = True) -> float | None:
        merged = ({**self.var_vals, **var_vals} if self.var_vals else var_vals) if var_vals else self.var_vals
        for b in self.bufs:
            if not hasattr(b, "_buf"): b.allocate()   # (Buffer.ensure_allocated, without two calls per buffer)
        profiling = PROFILE.value   # (flags read once: each ContextVar comparison is a Python call)
        timed = wait or profiling or DEBUG.value >= 2
        start = profile.now() if profiling else 0.0
        elapsed = self.prg(self.bufs, merged, wait=timed)
        if profiling:
            kind = "kernel" if isinstance(self.prg, CompiledRunner) else "copy"
            profile.record(ansistrip(self.prg.display_name).strip(), kind, start, elapsed if elapsed is not None else profile.now() - start,
                           track=self.prg.device, buffers=len(self.bufs))
        if do_update_stats: _update_stats(self.prg, merged, elapsed, len(self.bufs))
        return elapsed

def _update_stats(prg: Runner, var_vals: dict[UOp, int], elapsed: float | None, nbufs: int) -> None:
    ops = sym_infer(prg.op_estimate, var_vals) if var_vals else prg.op_estimate
    mem = sym_infer(prg.mem_estimate, var_vals) if var_vals else prg.mem_estimate
    if isinstance(prg, CompiledRunner): GlobalCounters.kernel_count += 1
    if isinstance(ops, int): GlobalCounters.global_ops += int(ops)
    if isinstance(mem, int): GlobalCounters.global_mem += int(mem)
    if elapsed is None: return
    GlobalCounters.time_sum_s += elapsed
    if DEBUG.value >= 2: kernel_times[ansistrip(prg.display_name).strip()].append(elapsed)
    if DEBUG.value >= 2:
        name = prg.display_name + " " * max(0, 38 - ansilen(prg.display_name))
        rate = f"({ops/elapsed*1e-9:8.2f} GFLOPS {mem/elapsed*1e-9:7.2f} GB/s)" if elapsed > 0 and isinstance(ops, int) else ""
        print(f"*** {prg.device[:7]:7s} {GlobalCounters.kernel_count:4d} {name} arg {nbufs:3d} "
              f"mem {GlobalCounters.mem_used/1e9:6.3f} GB tm {elapsed*1e6:9.2f}us/{GlobalCounters.time_sum_s*1e3:9.2f}ms {rate}")

capturing: list[Callable[[ExecItem], None]] = []

# Conditions ``small <= large`` on symbolic sizes that the front end checked with the variables' bound values (a
# symbolic shrink's bounds within its dimension). A TinyJit capture collects them here and checks them again with
# every replay's values: a replay can't run its kernels with a value that reads past the end of a buffer.
shape_guards: list[list[tuple[Any, Any]]] = []

# ---------------------------------------------------------------- compile times and the DEBUG=2 summary

kernel_times: collections.defaultdict[str, list[float]] = collections.defaultdict(list)   # name -> run times (DEBUG>=2)
compile_times: dict[str, float] = {}   # kernel name -> seconds spent generating + compiling it (this process)

def _timed_compile(compiler: Any, name: str, src: str) -> bytes:
    """compile_cached, timed: the time goes to ``compile_times``, a PROFILE span and (DEBUG>=2) a line."""
    start = time.perf_counter()
    lib = compiler.compile_cached(src)
    elapsed = time.perf_counter() - start
    compile_times[name] = compile_times.get(name, 0.0) + elapsed
    if PROFILE: profile.record(f"compile {name}", "compile", start, elapsed, track="compile")
    if DEBUG >= 2: print(f"compile: {name:38s} {elapsed * 1e3:8.2f} ms")
    return lib

def _timed_compile_batch(compiler: Any, programs: list[ProgramSpec]) -> list[bytes]:
    """compile_cached_batch, timed like ``_timed_compile``; each kernel is charged an equal share of the batch's time."""
    if len(programs) == 1: return [_timed_compile(compiler, programs[0].name, programs[0].src)]
    start = time.perf_counter()
    libs = compiler.compile_cached_batch([p.src for p in programs])
    elapsed = time.perf_counter() - start
    for p in programs: compile_times[p.name] = compile_times.get(p.name, 0.0) + elapsed / len(programs)
    if PROFILE: profile.record(f"compile {len(programs)} kernels", "compile", start, elapsed, track="compile")
    if DEBUG >= 2: print(f"compile: {len(programs)} kernels {' '.join(p.name for p in programs)[:60]:60s} {elapsed * 1e3:8.2f} ms")
    return libs

def debug_summary(top: int = 10) -> str:
    """The DEBUG=2 exit summary: kernels by total run time, and the total compile time."""
    lines = []
    if kernel_times:
        total = sum(sum(times) for times in kernel_times.values())
        lines.append(f"summary: {sum(len(t) for t in kernel_times.values())} kernel runs, {total * 1e3:.2f} ms; top kernels by time:")
        ranked = sorted(kernel_times.items(), key=lambda item: -sum(item[1]))[:top]
        for name, times in ranked:
            lines.append(f"  {name:38s} {len(times):6d} runs {sum(times) * 1e3:10.3f} ms {100 * sum(times) / max(total, 1e-12):5.1f}%")
    if compile_times: lines.append(f"summary: compiled {len(compile_times)} kernels in {sum(compile_times.values()):.2f} s")
    return "\n".join(lines)

@atexit.register
def _print_debug_summary() -> None:
    if DEBUG >= 2 and (summary := debug_summary()): print(summary)

class CompileProgress:
    """A line on stderr while a batch of compiles has taken longer than ``after`` seconds
    ("compiling 93 kernels ... 4.1 s"), redrawn in place on a terminal, printed once at the end otherwise."""
    def __init__(self, total: int, after: float = 1.0):
        self.total, self.after, self.done, self.start, self.shown = total, after, 0, time.perf_counter(), False
        self.terminal = sys.stderr.isatty()
    def line(self) -> str:
        count = f"{self.done}/{self.total}" if self.done < self.total else f"{self.total}"
        return f"compiling {count} kernels ... {time.perf_counter() - self.start:.1f} s"
    def step(self) -> None:
        self.done += 1
        if self.terminal and time.perf_counter() - self.start > self.after:
            print("\r" + self.line(), end="", file=sys.stderr, flush=True)
            self.shown = True
    def close(self) -> None:
        if time.perf_counter() - self.start > self.after:
            print(("\r" if self.shown else "") + self.line(), file=sys.stderr, flush=True)

def lower_schedule_item(item) -> ExecItem:
    """Turn a ScheduleItem into an ExecItem (compiling its kernel if needed)."""
    bufs = item.bufs
    if item.ast.op is Ops.COPY:
        return ExecItem(BufferCopy(bufs[0].nbytes, bufs[0].device, bufs[1].device), bufs, dict(item.var_vals))
    return ExecItem(get_runner(bufs[0].device, item.ast), bufs, dict(item.var_vals))

_compile_pool: "concurrent.futures.ThreadPoolExecutor | None" = None
# precompile sends a step's kernels to the compilers in about CHUNKS_PER_WORKER batches per core, of at least MIN_BATCH
# kernels: more, smaller batches keep the cores busy to the end (MNIST's 74 kernels: first step 2.2 -> 2.0 s), but
# each compiler process costs a start and competes with code generation for a core (GPT-2's 35 large kernels in
# batches of 9: 1.4 -> 1.6 s)
CHUNKS_PER_WORKER, MIN_BATCH = 2, 16

def precompile(schedule: list) -> None:
    """Generate and compile every kernel of ``schedule`` not in the method cache yet. Code generation
    runs here (Python) while the C compiler processes run in a thread pool, several at once, so a
    first training step compiles its dozens of kernels in parallel instead of one after another."""
    global _compile_pool
    if len(schedule) < 2: return   # nothing to overlap: get_runner compiles it
    todo: dict[tuple, tuple[str, UOp]] = {}
    for item in schedule:
        if item.ast.op is Ops.COPY: continue
        device = item.buffer_uops[0].device
        shared_key = _cache_key(_device_base(device), item.ast)
        if shared_key not in method_cache: todo.setdefault(shared_key, (device, item.ast))
    if len(todo) < 2: return   # nothing to overlap: get_runner compiles it
    workers = max(1, os.cpu_count() or 1)
    if _compile_pool is None: _compile_pool = concurrent.futures.ThreadPoolExecutor(workers)
    batches: list[tuple[list[tuple[tuple, ProgramSpec]], concurrent.futures.Future]] = []
    waiting: dict[str, list[tuple[tuple, ProgramSpec]]] = {}   # device -> generated kernels not submitted yet
    def submit(device: str, parts: int) -> None:
        for chunk in _balanced(waiting.pop(device, []), parts):
            batches.append((chunk, _compile_pool.submit(_timed_compile_batch, Device[device].compiler, [p for _, p in chunk])))
    progress, unsaved = CompileProgress(len(todo)), []
    chunk = max(MIN_BATCH, -(-len(todo) // (CHUNKS_PER_WORKER * workers)))
    for shared_key, (device, ast) in todo.items():
        with profile.span("codegen", "codegen"):
            program = _program(device, ast, unsaved)
        waiting.setdefault(device, []).append((shared_key, program))
        # this thread generates a kernel (~6 ms) much faster than a compiler compiles it (~35 ms): every `chunk` kernels
        # go to the pool's queue, which runs `workers` compiler processes at once. Batches of a fixed size keep every
        # core busy to the end (a batch holding whatever piled up while the first one compiled was most of the step,
        # and one core compiled it alone: 1.8 of MNIST's 2.8 s); a compiler process costs ~40 ms to start, so a few
        # batches per core, not one per kernel
        if len(waiting[device]) >= chunk: submit(device, 1)
    for device in list(waiting): submit(device, workers)   # the rest, split over every core
    program_cache.store_many(unsaved)   # (while the compilers run)
    for chunk, future in batches:
        for (shared_key, program), lib in zip(chunk, future.result()):
            method_cache[shared_key] = CompiledRunner(program, precompiled=lib)
            progress.step()
    progress.close()

def _balanced(items: list[tuple[tuple, ProgramSpec]], parts: int) -> list[list[tuple[tuple, ProgramSpec]]]:
    """``items`` in at most ``parts`` non-empty chunks of about equal source length (largest first, each to the lightest chunk)."""
    chunks: list[list] = [[] for _ in range(max(1, min(parts, len(items))))]
    sizes = [0] * len(chunks)
    for item in sorted(items, key=lambda item: -len(item[1].src)):
        lightest = sizes.index(min(sizes))
        chunks[lightest].append(item)
        sizes[lightest] += len(item[1].src)
    return [chunk for chunk in chunks if chunk]

def run_schedule(schedule: list, var_vals: dict[UOp, int] | None = None, do_update_stats: bool = True) -> None:
    """Run every item in order."""
    # (flags read through .value: comparing or testing the ContextVar itself is a Python call, on every eager op)
    if DEBUG.value >= 1 and schedule: print(f"realize: running {len(schedule)} kernel{'s' if len(schedule) != 1 else ''}")
    if VIZ.value and schedule:
        from fusegrad.viz import trace
        trace.record_schedule(schedule)
    if len(schedule) > 1: precompile(schedule)   # (one item: nothing to compile in parallel)
    for item in schedule:
        exec_item = lower_schedule_item(item)
        for hook in capturing: hook(exec_item)
        exec_item.run(var_vals, do_update_stats=do_update_stats)
